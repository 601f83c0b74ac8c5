"""Drive `verbd mcp` with the official MCP Python SDK (`mcp` on PyPI) and report what it saw.

Run by tests/cli/mcp.rs, never on its own: the Rust test starts a real daemon, writes a plan (JSON on
stdin), and asserts on the report (JSON on stdout). This script only acts as the MCP client (and,
where a plan says so, as the human who approves or the operator who reloads); it asserts
nothing, so every check lives in the Rust test next to the setup it depends on.

The plan:
  {"verbd": BIN, "socket": PATH, "uid": N,             # `verbd mcp` runs as uid N (setpriv)
   "mode": "legacy" | "auto",                          # the SDK's connect mode (see below)
   "steps": [ {"op": ...}, ... ]}

`mode="legacy"` makes the SDK open with `initialize` (it negotiates 2025-11-25); `mode="auto"`
makes it probe `server/discover` and use the 2026-07-28 lifecycle (per-request `_meta`,
`subscriptions/listen`). The report records the negotiated version, so the test proves which era
ran.

Steps (each adds one entry to the report's "steps", in order):
  {"op": "list"}                                    -> {"tools": [wire-format tools]} | {"error"}
  {"op": "call", "tool": T, "args": {...}}          -> {"result": wire-format result} | {"error"}
  {"op": "call_from", "tool": T, "from": I}         -> calls T with {"id": <id of step I>}
  {"op": "call_progress", "tool": T, "args": {...}} -> the call with a progress callback:
        {"result", "progress": [{"progress", "message", "at_s"}], "result_at_s"} (seconds since
        the call started)
  {"op": "concurrent", "first": CALL, "second": CALL, "after_ms": M}
        -> starts the first call, starts the second M ms later, reports both
  {"op": "approve", "uid": N, "from": I}            -> `verbd approve ID --hash PREFIX` as uid N
  {"op": "reload", "policy": PATH, "text": TOML, "daemon_pid": P, "timeout_s": S}
        -> writes the new policy, SIGHUPs the daemon, waits for notifications/tools/list_changed
"""

import json
import os
import signal
import subprocess
import sys
import time

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def as_uid(uid, argv):
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]


async def call(client, tool, args):
    try:
        return {"result": dump(await client.call_tool(tool, args))}
    except MCPError as e:
        return {"error": {"code": e.code, "message": e.message, "data": e.data}}


async def run(plan):
    report = {"steps": []}
    changed = {"count": 0, "event": anyio.Event()}

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed["count"] += 1
            changed["event"].set()

    server = StdioServerParameters(
        command="setpriv",
        args=as_uid(plan["uid"], [plan["verbd"], "mcp", "--socket", plan["socket"]])[1:],
    )
    async with Client(server, mode=plan["mode"], message_handler=on_message, read_timeout_seconds=120) as client:
        report["protocol_version"] = client.protocol_version
        report["server_name"] = client.server_info.name if client.server_info else None
        report["tools_list_changed"] = bool(
            client.server_capabilities.tools and client.server_capabilities.tools.list_changed
        )
        report["instructions"] = client.instructions
        steps = report["steps"]
        for step in plan["steps"]:
            op = step["op"]
            if op == "list":
                try:
                    listed = await client.list_tools(cache_mode="bypass")
                    steps.append({"tools": [dump(t) for t in listed.tools]})
                except MCPError as e:
                    steps.append({"error": {"code": e.code, "message": e.message, "data": e.data}})
            elif op == "call":
                steps.append(await call(client, step["tool"], step.get("args", {})))
            elif op == "call_progress":
                started = time.monotonic()
                seen = []

                async def on_progress(progress, total, message):
                    seen.append({"progress": progress, "message": message, "at_s": time.monotonic() - started})

                outcome = dump(await client.call_tool(step["tool"], step.get("args", {}), progress_callback=on_progress))
                steps.append({"result": outcome, "progress": seen, "result_at_s": time.monotonic() - started})
            elif op == "call_from":
                source = steps[step["from"]]["result"]["structuredContent"]
                steps.append(await call(client, step["tool"], {"id": source["id"], **step.get("args", {})}))
            elif op == "concurrent":
                outcome = {}

                async def first():
                    outcome["first"] = await call(client, step["first"]["tool"], step["first"].get("args", {}))

                async with anyio.create_task_group() as group:
                    group.start_soon(first)
                    await anyio.sleep(step["after_ms"] / 1000)
                    outcome["second"] = await call(client, step["second"]["tool"], step["second"].get("args", {}))
                steps.append(outcome)
            elif op == "approve":
                source = steps[step["from"]]["result"]["structuredContent"]
                argv = as_uid(
                    step["uid"],
                    [plan["verbd"], "approve", str(source["id"]), "--hash", source["args_hash"][:12], "--json"],
                )
                done = subprocess.run(
                    argv,
                    env={**os.environ, "VERBD_SOCKET": plan["socket"]},
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                steps.append({"exit": done.returncode, "stdout": done.stdout, "stderr": done.stderr})
            elif op == "reload":
                steps.append(await reload(client, step, changed))
            else:
                raise SystemExit(f"unknown step {op!r}")
    return report


async def reload(client, step, changed):
    """Swap the policy file, SIGHUP the daemon, and wait for the list-changed notification:
    on the session (legacy) or on a `subscriptions/listen` stream (2026-07-28)."""

    def swap():
        with open(step["policy"], "w") as f:
            f.write(step["text"])
        os.kill(step["daemon_pid"], signal.SIGHUP)

    started = time.monotonic()
    if client.protocol_version == "2026-07-28":
        async with client.listen(tools_list_changed=True) as subscription:
            swap()
            with anyio.move_on_after(step["timeout_s"]) as scope:
                async for event in subscription:
                    return {"notified": True, "via": type(event).__name__, "after_s": time.monotonic() - started}
            return {"notified": False, "timed_out": scope.cancelled_caught}
    before = changed["count"]
    changed["event"] = anyio.Event()
    swap()
    with anyio.move_on_after(step["timeout_s"]):
        await changed["event"].wait()
    notified = changed["count"] > before
    return {"notified": notified, "via": "session", "after_s": time.monotonic() - started}


def main():
    plan = json.load(sys.stdin)
    report = anyio.run(run, plan)
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
