//! The tool catalog: the verbs the caller may call (the daemon's `list`), as MCP tools.
//!
//! Responsibility: one tool per verb, with a name every client accepts, a flat input schema
//! built from the daemon's own parameter schemas, and all four annotations set from the verb's
//! category; plus `verbd_wait` and `verbd_result` when a listed verb needs approval.
//!
//! Invariants:
//! - Names are deterministic and reversible: a verb's tool name is its name with `.` (and any
//!   character outside `[A-Za-z0-9_-]`) as `_`; a name longer than [`MAX_TOOL_NAME`] keeps its
//!   first 43 characters and gets `_` and 8 hex digits of the verb name's SHA-256. The catalog
//!   maps each tool name back to exactly one verb; two verbs that would share a name (or take a
//!   reserved one) refuse the whole catalog with a [`CatalogError`] naming both — never a tool
//!   that could reach the wrong verb.
//! - The catalog holds names, schemas and descriptions only: no decision. Every call goes to the
//!   daemon, which validates and decides as it would for `verbd call`.
//! - Input schemas are flat `type: object` with `additionalProperties: false` and no root-level
//!   `anyOf`/`oneOf`/`allOf` (the Claude API refuses those).
#![forbid(unsafe_code)]

use crate::protocol::{ParamInfo, VerbInfo};
use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The tool that waits for a proposal's decision and result.
pub const WAIT_TOOL: &str = "verbd_wait";
/// The tool that reads a proposal's state and result without waiting.
pub const RESULT_TOOL: &str = "verbd_result";
/// Longest wait one `verbd_wait` call may ask for: below the 60 s request timeout common MCP
/// clients use (the TypeScript SDK's default), so the answer arrives before the client gives up.
pub const MAX_WAIT_SECS: u64 = 50;
/// Longest tool name. Claude Code shows a tool as `mcp__<server>__<tool>` and the Claude API caps
/// tool names at 64 characters; with the server named `verbd` that leaves 52.
pub const MAX_TOOL_NAME: usize = 52;
/// Claude Code's `_meta` key that forces a human prompt for a tool in every permission mode.
pub const REQUIRES_USER_INTERACTION: &str = "anthropic/requiresUserInteraction";

/// Characters kept from a long name before its hash.
const LONG_NAME_PREFIX: usize = 43;

/// Why no catalog could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error(
        "verbs `{first}` and `{second}` would both be the MCP tool `{tool}` (tool names allow only letters, digits, `_` and `-`, at most {MAX_TOOL_NAME} characters); verbd mcp lists no tools until the operator renames one of them in the policy"
    )]
    Collision {
        tool: String,
        first: String,
        second: String,
    },
}

/// The tools of one `list` answer, and the way back from a tool name to its verb.
#[derive(Debug, Clone)]
pub struct Catalog {
    tools: Vec<Tool>,
    verbs: BTreeMap<String, String>,
}

impl Catalog {
    /// Build the catalog for the verbs `list` returned.
    pub fn build(verbs: &[VerbInfo]) -> Result<Catalog, CatalogError> {
        let mut owners: BTreeMap<String, String> = [WAIT_TOOL, RESULT_TOOL]
            .into_iter()
            .map(|reserved| (reserved.to_string(), format!("(reserved) {reserved}")))
            .collect();
        let mut tools = Vec::with_capacity(verbs.len() + 2);
        for verb in verbs {
            let name = tool_name(&verb.name);
            if let Some(first) = owners.insert(name.clone(), verb.name.clone()) {
                return Err(CatalogError::Collision {
                    tool: name,
                    first,
                    second: verb.name.clone(),
                });
            }
            tools.push(verb_tool(name, verb));
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        if verbs.iter().any(|v| v.needs_approval) {
            tools.push(wait_tool());
            tools.push(result_tool());
        }
        owners.remove(WAIT_TOOL);
        owners.remove(RESULT_TOOL);
        Ok(Catalog {
            tools,
            verbs: owners,
        })
    }

    /// The tools, in a stable order (verbs by tool name, then `verbd_wait`, `verbd_result`).
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The verb a tool name stands for.
    pub fn verb_of(&self, tool: &str) -> Option<&str> {
        self.verbs.get(tool).map(String::as_str)
    }

    /// A digest of everything a client sees in the list: equal digests, equal lists.
    pub fn fingerprint(&self) -> String {
        let text = serde_json::to_string(&self.tools).expect("tools always serialize");
        crate::digest::sha256_hex(text.as_bytes())
    }
}

/// The MCP tool name of a verb (see the module documentation).
///
/// ```
/// use verbd::adapters::mcp::catalog::tool_name;
/// assert_eq!(tool_name("file.write"), "file_write");
/// assert_eq!(tool_name("logs"), "logs");
/// assert_eq!(tool_name(&"x".repeat(60)).len(), 52);
/// ```
pub fn tool_name(verb: &str) -> String {
    let mapped: String = verb
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !mapped.is_empty() && mapped.len() <= MAX_TOOL_NAME {
        return mapped;
    }
    let digest = crate::digest::sha256_hex(verb.as_bytes());
    let prefix: String = mapped.chars().take(LONG_NAME_PREFIX).collect();
    format!("{prefix}_{}", &digest[..8])
}

fn verb_tool(name: String, verb: &VerbInfo) -> Tool {
    let mut tool = Tool::new(name, verb_description(verb), Arc::new(input_schema(verb)))
        .with_title(verb.name.clone())
        .with_raw_output_schema(Arc::new(output_schema()))
        .with_annotations(annotations(&verb.category));
    if verb.category != "read-only" && verb.category != "mutating" {
        let mut meta = MetaObject::new();
        meta.insert(REQUIRES_USER_INTERACTION.into(), Value::Bool(true));
        tool = tool.with_meta(meta);
    }
    tool
}

/// All four hints, explicitly: the spec's defaults (destructive, open world) are pessimistic.
/// An unknown category is treated as destructive, as the daemon treats it as needing approval.
fn annotations(category: &str) -> ToolAnnotations {
    let (read_only, destructive, idempotent) = match category {
        "read-only" => (true, false, true),
        "mutating" => (false, false, false),
        _ => (false, true, false),
    };
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(destructive)
        .idempotent(idempotent)
        .open_world(false)
}

fn verb_description(verb: &VerbInfo) -> String {
    let how = if verb.needs_approval {
        format!(
            "{} verb; each call needs a human's approval: it returns CONFIRM_REQUIRED with an id and runs only after a person approves it; then call {WAIT_TOOL}",
            verb.category
        )
    } else {
        format!("{} verb; runs at once", verb.category)
    };
    if verb.description.is_empty() {
        format!("[verbd `{}`: {how}]", verb.name)
    } else {
        format!("{} [verbd `{}`: {how}]", verb.description, verb.name)
    }
}

/// `{type: object, properties, required, additionalProperties: false}` from the parameters.
fn input_schema(verb: &VerbInfo) -> JsonObject {
    let mut properties = JsonObject::new();
    for param in &verb.params {
        properties.insert(param.name.clone(), property(param));
    }
    let required: Vec<&str> = verb
        .params
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name.as_str())
        .collect();
    object_schema(properties, &required)
}

fn object_schema(properties: JsonObject, required: &[&str]) -> JsonObject {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    schema.insert("additionalProperties".into(), Value::Bool(false));
    schema
}

/// One parameter: the daemon's schema for its values (a string when the daemon sent none) and a
/// description that names its type and rules in words (what JSON Schema cannot say).
fn property(param: &ParamInfo) -> Value {
    let mut schema = match &param.schema {
        Some(Value::Object(map)) => map.clone(),
        _ => {
            let mut map = JsonObject::new();
            map.insert("type".into(), json!("string"));
            map
        }
    };
    let description = if param.description.is_empty() {
        param.kind.clone()
    } else {
        format!("{} ({})", param.description, param.kind)
    };
    schema.insert("description".into(), Value::String(description));
    Value::Object(schema)
}

/// The shape of every non-error `structuredContent` these tools return; `status` says which
/// fields are present (docs/protocol.md, "MCP").
fn output_schema() -> JsonObject {
    let int = json!({ "type": "integer" });
    let int_or_null = json!({ "type": ["integer", "null"] });
    let string = json!({ "type": "string" });
    let boolean = json!({ "type": "boolean" });
    let properties = [
        (
            "status",
            json!({ "type": "string", "enum": [
                "ran", "pending_approval", "in_progress", "invalid", "denied", "expired",
                "failed", "unknown_outcome", "resolved", "busy", "error"
            ] }),
        ),
        ("exit_code", int_or_null.clone()),
        ("signal", int_or_null),
        ("timed_out", boolean.clone()),
        ("stdout", string.clone()),
        ("stderr", string.clone()),
        ("stdout_truncated", boolean.clone()),
        ("stderr_truncated", boolean),
        ("stdout_withheld", int.clone()),
        ("stderr_withheld", int.clone()),
        ("duration_ms", int.clone()),
        ("ended_by", string.clone()),
        ("id", int.clone()),
        ("args_hash", string.clone()),
        ("expires_at", string.clone()),
        ("state", string.clone()),
        ("proposal", int.clone()),
        ("message", string.clone()),
        ("reason", string.clone()),
        ("note", string.clone()),
        ("param", string.clone()),
        ("rule", string),
        (
            "missing",
            json!({ "type": "array", "items": { "type": "string" } }),
        ),
    ];
    let mut schema = object_schema(
        properties
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        &["status"],
    );
    schema.remove("additionalProperties");
    schema
}

fn proposal_tool(name: &'static str, description: String, with_timeout: bool) -> Tool {
    let mut properties = JsonObject::new();
    properties.insert(
        "id".into(),
        json!({ "type": "integer", "minimum": 1, "description": "The proposal id from CONFIRM_REQUIRED" }),
    );
    if with_timeout {
        properties.insert(
            "timeout_s".into(),
            json!({
                "type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECS, "default": MAX_WAIT_SECS,
                "description": format!("Seconds to wait for the decision (at most {MAX_WAIT_SECS})"),
            }),
        );
    }
    Tool::new(
        name,
        description,
        Arc::new(object_schema(properties, &["id"])),
    )
    .with_raw_output_schema(Arc::new(output_schema()))
    .with_annotations(annotations("read-only"))
}

fn wait_tool() -> Tool {
    proposal_tool(
        WAIT_TOOL,
        format!(
            "Wait (at most {MAX_WAIT_SECS} s) for a human's decision on a proposal you made (the id from CONFIRM_REQUIRED), and return the verb's result once it ran. If it is still pending, tell the user it waits for their approval instead of waiting again in a loop."
        ),
        true,
    )
}

fn result_tool() -> Tool {
    proposal_tool(
        RESULT_TOOL,
        "The state of a proposal you made (the id from CONFIRM_REQUIRED) and, once it ran, the verb's result; returns at once.".into(),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verb(name: &str, category: &str, needs_approval: bool) -> VerbInfo {
        VerbInfo {
            name: name.into(),
            description: String::new(),
            category: category.into(),
            needs_approval,
            params: Vec::new(),
        }
    }

    #[test]
    fn names_are_valid_short_and_distinct() {
        let long_a = format!("{}a", "x".repeat(59));
        let long_b = format!("{}b", "x".repeat(59));
        for name in ["file.write", "a-b_c", &long_a, "", "dots.and spaces"] {
            let tool = tool_name(name);
            assert!(!tool.is_empty() && tool.len() <= MAX_TOOL_NAME, "{tool}");
            assert!(
                tool.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{tool}"
            );
        }
        assert_ne!(tool_name(&long_a), tool_name(&long_b));
        assert_eq!(tool_name(&long_a), tool_name(&long_a));
    }

    #[test]
    fn colliding_and_reserved_names_refuse_the_catalog() {
        let err = Catalog::build(&[
            verb("a.b", "read-only", false),
            verb("a_b", "read-only", false),
        ])
        .unwrap_err();
        assert_eq!(
            err,
            CatalogError::Collision {
                tool: "a_b".into(),
                first: "a.b".into(),
                second: "a_b".into()
            }
        );
        let err = Catalog::build(&[verb("verbd.wait", "read-only", false)]).unwrap_err();
        assert!(err.to_string().contains("`verbd.wait`"), "{err}");
        let ok = Catalog::build(&[
            verb("a.b", "read-only", false),
            verb("a-b", "read-only", false),
        ])
        .unwrap();
        assert_eq!(ok.verb_of("a_b"), Some("a.b"));
        assert_eq!(ok.verb_of("a-b"), Some("a-b"));
        assert_eq!(ok.verb_of(WAIT_TOOL), None);
    }

    #[test]
    fn wait_and_result_only_with_an_approval_verb() {
        let names = |c: &Catalog| {
            c.tools()
                .iter()
                .map(|t| t.name.to_string())
                .collect::<Vec<_>>()
        };
        let plain = Catalog::build(&[verb("b", "read-only", false)]).unwrap();
        assert_eq!(names(&plain), ["b"]);
        let with =
            Catalog::build(&[verb("z", "mutating", true), verb("b", "read-only", false)]).unwrap();
        assert_eq!(names(&with), ["b", "z", WAIT_TOOL, RESULT_TOOL]);
    }
}
