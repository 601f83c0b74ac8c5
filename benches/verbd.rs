//! Benchmarks: argument validation + rendering of a 5-parameter verb, and one run that compares,
//! side by side, spawning `/bin/true` directly, spawning it inside the sandbox, and a `/bin/true`
//! verb round trip over the daemon socket; and the same round trip with the journal's
//! forward-secure sealing at its default (epochs of 1000 records), never sealing during the run,
//! and sealing after every record; and the same `/bin/true` verb called over the native protocol
//! and as an MCP `tools/call` through `verbd mcp`, interleaved. Results are written up in
//! docs/PERFORMANCE.md.
use criterion::{Criterion, criterion_group, criterion_main};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::process::{Command, Stdio};
use std::time::Duration;
use verbd::policy::{self, Verdict};
use verbd::protocol::{Request, Response};

const POLICY: &str = r#"
version = 1
[daemon]
allow_root = true
[roles.me]
users = ["@invoker"]
uids = [0]

[verb.logs]
description = "five params"
category = "read-only"
roles = ["me"]
command = "/usr/bin/journalctl --no-pager -u {unit} -n {lines} --since=-{since} -o {format} [ --grep {pattern} ]"
params.unit = { type = "systemd-unit" }
params.lines = { type = "int", min = 1, max = 5000 }
params.since = { type = "duration" }
params.format = { type = "enum", values = ["short", "short-iso", "json", "cat"] }
params.pattern = { type = "string", pattern = "[A-Za-z0-9 ._-]{1,64}", required = false }

[verb.true]
description = "does nothing"
category = "read-only"
roles = ["me"]
command = "/bin/true"
"#;

fn validate_and_render(c: &mut Criterion) {
    let policy = policy::compile(POLICY, "bench").expect("bench policy compiles");
    let roles: Vec<&policy::Role> = policy.roles.values().collect();
    let args: BTreeMap<String, serde_json::Value> = [
        ("unit", "nginx.service"),
        ("lines", "200"),
        ("since", "1h30m"),
        ("format", "short-iso"),
        ("pattern", "upstream timed out"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.into())))
    .collect();
    c.bench_function("validate+render 5-param verb", |b| {
        b.iter(
            || match policy.evaluate(&roles, black_box("logs"), black_box(&args)) {
                Verdict::Run(call) => black_box(call),
                other => panic!("{other:?}"),
            },
        )
    });
}

struct BenchDaemon {
    child: std::process::Child,
    socket: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for BenchDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_daemon() -> BenchDaemon {
    start_daemon_sealing(None)
}

/// A daemon whose journal keys were made with `audit setup-keys --epoch-records N`.
fn start_daemon_sealing(epoch_records: Option<u64>) -> BenchDaemon {
    let dir = tempfile::tempdir().unwrap();
    if let Some(records) = epoch_records {
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let made = Command::new(env!("CARGO_BIN_EXE_verbd"))
            .args([
                "audit",
                "setup-keys",
                "--epoch-seconds",
                "86400",
                "--epoch-records",
            ])
            .arg(records.to_string())
            .arg("--state-dir")
            .arg(&state)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
    }
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, POLICY).unwrap();
    let socket = dir.path().join("verbd.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_verbd"))
        .arg("serve")
        .arg("--policy")
        .arg(&policy)
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env("VERBD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start verbd");
    for _ in 0..500 {
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    BenchDaemon {
        child,
        socket,
        _dir: dir,
    }
}

fn spawn_comparison(c: &mut Criterion) {
    let daemon = start_daemon();
    let policy = policy::compile(POLICY, "bench").unwrap();
    let spec = policy.sandboxes["default"].clone();
    let sandbox = verbd::sandbox::PreparedSandbox::prepare(spec).expect("sandbox prepares");
    let mut group = c.benchmark_group("true: raw spawn vs sandboxed spawn vs verb call");
    group.sample_size(200);
    group.bench_function("raw spawn /bin/true", |b| {
        b.iter(|| {
            let status = Command::new("/bin/true").status().unwrap();
            assert!(status.success());
        })
    });
    group.bench_function("sandboxed spawn /bin/true", |b| {
        b.iter(|| {
            let mut cmd = Command::new("/bin/true");
            cmd.env_clear();
            sandbox.install_std(&mut cmd).unwrap();
            let status = cmd.status().unwrap();
            assert!(status.success());
        })
    });
    let request = Request::Call {
        verb: "true".into(),
        args: BTreeMap::new(),
        reason: None,
        idempotency_key: None,
        stream: None,
    };
    group.bench_function("verb call over the socket (journaled, fsync)", |b| {
        b.iter(|| {
            match verbd::client::request(&daemon.socket, &request, Duration::from_secs(10)).unwrap()
            {
                Response::Ok { result, .. } => assert_eq!(result.exit.code, Some(0)),
                other => panic!("{other:?}"),
            }
        })
    });
    group.finish();
}

/// The cost of forward-secure sealing on a verb call: three daemons called in turn within every
/// iteration (so a busy machine slows all alike); each variant counts only its own calls.
fn sealing_comparison(c: &mut Criterion) {
    let request = Request::Call {
        verb: "true".into(),
        args: BTreeMap::new(),
        reason: None,
        idempotency_key: None,
        stream: None,
    };
    let variants = [
        ("epochs of 1000 records (default)", 1000),
        ("no seal during the run", u64::MAX / 2),
        ("a seal after every record (worst case)", 1),
    ];
    let daemons: Vec<BenchDaemon> = variants
        .iter()
        .map(|(_, records)| start_daemon_sealing(Some(*records)))
        .collect();
    let call = |daemon: &BenchDaemon| match verbd::client::request(
        &daemon.socket,
        &request,
        Duration::from_secs(10),
    )
    .unwrap()
    {
        Response::Ok { result, .. } => assert_eq!(result.exit.code, Some(0)),
        other => panic!("{other:?}"),
    };
    let mut group = c.benchmark_group("verb call: journal sealing, interleaved");
    group.sample_size(100);
    for (measured, (name, _)) in variants.iter().enumerate() {
        group.bench_function(*name, |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    for (index, daemon) in daemons.iter().enumerate() {
                        let started = std::time::Instant::now();
                        call(daemon);
                        if index == measured {
                            total += started.elapsed();
                        }
                    }
                }
                total
            })
        });
    }
    group.finish();
}

/// A `verbd mcp` child with an initialized (legacy) session, driven over its stdin/stdout.
struct McpSession {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl McpSession {
    fn start(socket: &std::path::Path) -> McpSession {
        let mut child = Command::new(env!("CARGO_BIN_EXE_verbd"))
            .arg("mcp")
            .arg("--socket")
            .arg(socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start verbd mcp");
        let mut session = McpSession {
            stdin: child.stdin.take().unwrap(),
            stdout: std::io::BufReader::new(child.stdout.take().unwrap()),
            child,
            next_id: 1,
        };
        session.request(
            "initialize",
            serde_json::json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "bench", "version": "0" },
            }),
        );
        session
            .send(serde_json::json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        session
    }

    fn send(&mut self, message: serde_json::Value) {
        use std::io::Write;
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::BufRead;
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }),
        );
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "verbd mcp closed"
            );
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }
}

impl Drop for McpSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `/bin/true` verb over the native protocol and as an MCP `tools/call` (one `verbd mcp`
/// session, which opens a daemon connection per call), called in turn within every iteration so
/// a busy machine slows both alike; each variant counts only its own calls.
fn mcp_comparison(c: &mut Criterion) {
    let daemon = start_daemon();
    let mut mcp = McpSession::start(&daemon.socket);
    let request = Request::Call {
        verb: "true".into(),
        args: BTreeMap::new(),
        reason: None,
        idempotency_key: None,
        stream: None,
    };
    let native = || match verbd::client::request(&daemon.socket, &request, Duration::from_secs(10))
        .unwrap()
    {
        Response::Ok { result, .. } => assert_eq!(result.exit.code, Some(0)),
        other => panic!("{other:?}"),
    };
    let mut through_mcp = || {
        let answer = mcp.request(
            "tools/call",
            serde_json::json!({ "name": "true", "arguments": {} }),
        );
        assert_eq!(
            answer["result"]["structuredContent"]["exit_code"], 0,
            "{answer}"
        );
    };
    let mut group = c.benchmark_group("true verb: native protocol vs MCP tools/call, interleaved");
    group.sample_size(200);
    for (measured, name) in [
        "native protocol (verbd::client)",
        "MCP tools/call via verbd mcp",
    ]
    .into_iter()
    .enumerate()
    {
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let started = std::time::Instant::now();
                    native();
                    if measured == 0 {
                        total += started.elapsed();
                    }
                    let started = std::time::Instant::now();
                    through_mcp();
                    if measured == 1 {
                        total += started.elapsed();
                    }
                }
                total
            })
        });
    }
    group.finish();
}

/// Ten system programs the 100 verbs are spread over (each checked once per profile).
const SELFTEST_PROGRAMS: [&str; 10] = [
    "/usr/bin/journalctl",
    "/usr/bin/systemctl",
    "/usr/bin/cat",
    "/usr/bin/ls",
    "/usr/bin/df",
    "/usr/bin/ps",
    "/usr/bin/uptime",
    "/usr/bin/hostname",
    "/usr/bin/id",
    "/usr/bin/stat",
];

/// The start-up self-test of a 100-verb policy (3 params each, examples, ten distinct programs,
/// one sandbox canary and one program probe child, which executes or reads every program, loader
/// and library inside the profile).
fn selftest_100_verbs(c: &mut Criterion) {
    let mut text = String::from("version = 1\n[roles.a]\nuids = [1]\n");
    for i in 0..100 {
        let program = SELFTEST_PROGRAMS[i % SELFTEST_PROGRAMS.len()];
        text.push_str(&format!(
            "[verb.v{i}]\ncategory = \"read-only\"\nroles = [\"a\"]\ncommand = \"{program} -u {{unit}} -n {{lines}} [ --grep {{pat}} ]\"\nparams.unit = {{ type = \"systemd-unit\" }}\nparams.lines = {{ type = \"int\", min = 1, max = 5000, default = 10 }}\nparams.pat = {{ type = \"string\", pattern = \"[a-z ]{{1,40}}\", required = false }}\nexamples.accept = [{{ unit = \"nginx.service\" }}]\nexamples.reject = [{{ unit = \"--all\" }}]\n"
        ));
    }
    let policy = policy::compile(&text, "bench-100").expect("100-verb policy compiles");
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_verbd"));
    let mut group = c.benchmark_group("selftest");
    group.sample_size(20);
    group.bench_function("100-verb policy", |b| {
        b.iter(|| {
            let report = verbd::selftest::run(&verbd::selftest::Context {
                policy: &policy,
                private: &[],
                daemon_uid: 0,
                canary_exe: exe.clone(),
                serving: None,
                state_dir: None,
                secrets: None,
                exec_namespaces: None,
            });
            assert!(report.passed(), "{}", report.render());
            assert!(
                report.checks.iter().any(|c| c.name == "programs:default"),
                "the program probe ran"
            );
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    validate_and_render,
    spawn_comparison,
    sealing_comparison,
    mcp_comparison,
    selftest_100_verbs
);
criterion_main!(benches);
