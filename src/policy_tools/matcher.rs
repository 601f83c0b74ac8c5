//! The template in reverse: which arguments would make a verb run a recorded argv?
//!
//! The verb's compiled [`Template`] is walked against the argv's words:
//! - the program matches by file name (`kubectl` or `/usr/bin/kubectl` for the template's
//!   `/usr/local/bin/kubectl`; an absolute path outside the system bin directories does not);
//! - literal elements match exactly, `{param}` pieces capture text that the parameter's real
//!   validator ([`crate::policy::params::Param::validate`]) accepts, a bool element matches its
//!   flag, an optional group matches whole or not at all;
//! - elements that are not options (subcommands, operands) keep their template order; options
//!   (elements starting with `-`) may appear in any order, and an option is tried with the
//!   element after it as its value (`-n {lines}` matches `-n 50` wherever it stands);
//! - the verb may *add* what the agent did not write: a literal option (`--no-pager`), a
//!   credential (`--kubeconfig ${secret_file:…}`), an element whose parameters all have
//!   defaults (`-n {lines}` with `default = 200`). These are reported as `added`.
//!
//! Every word of the argv must be consumed. The result is only a candidate: `coverage` then
//! runs it through [`crate::policy::Policy::evaluate`], the daemon's own validation and
//! rendering path, before calling the command covered.
#![forbid(unsafe_code)]

use crate::files::FileOp;
use crate::policy::params::{Param, ParamKind};
use crate::policy::template::{ElementTemplate, Item, Piece, Template};
use crate::policy::{Verb, VerbAction};
use std::collections::BTreeMap;
use std::path::Path;

/// Arguments under which the verb would run the argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub args: BTreeMap<String, String>,
    /// Template elements the verb adds that the recorded command did not have.
    pub added: Vec<String>,
}

/// Why a verb does not run the argv, and how far the match got (words consumed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    pub depth: usize,
    pub detail: String,
}

/// Directories where a program path counts as "the same program" as the template's.
const SYSTEM_BIN_DIRS: &[&str] = &[
    "/bin",
    "/sbin",
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/snap/bin",
];

/// Upper bound on search steps per verb (templates are short; this only stops pathologies).
const STEP_BUDGET: usize = 20_000;

/// Does `word` name the same program as `program`?
pub fn same_program(program: &Path, word: &str) -> bool {
    let name = Path::new(word).file_name();
    if name.is_none() || name != program.file_name() {
        return false;
    }
    if !word.contains('/') || Path::new(word) == program {
        return true;
    }
    Path::new(word)
        .parent()
        .is_some_and(|dir| SYSTEM_BIN_DIRS.iter().any(|d| Path::new(d) == dir))
}

/// Try to read `argv` as a call of `verb`.
pub fn match_verb(verb: &Verb, argv: &[String]) -> Result<Candidate, Miss> {
    let Some(program) = argv.first() else {
        return Err(Miss {
            depth: 0,
            detail: "empty command".into(),
        });
    };
    match &verb.action {
        VerbAction::Command { template, .. } => {
            if !same_program(template.program(), program) {
                return Err(Miss {
                    depth: 0,
                    detail: format!("runs {}", template.program().display()),
                });
            }
            match_template(template, &verb.params, &argv[1..])
        }
        VerbAction::File(spec) => match_file_verb(spec.op, argv),
    }
}

/// `cat PATH` is a `file.read` call and `ls [-1alh] PATH` a `file.list` call.
fn match_file_verb(op: FileOp, argv: &[String]) -> Result<Candidate, Miss> {
    let name = Path::new(&argv[0]).file_name().and_then(|n| n.to_str());
    let operands: Vec<&String> = argv[1..].iter().filter(|a| a.as_str() != "--").collect();
    let (wanted, ok) = match op {
        FileOp::Read => ("cat", operands.len() == 1 && !operands[0].starts_with('-')),
        FileOp::List => {
            let paths: Vec<&&String> = operands.iter().filter(|a| !a.starts_with('-')).collect();
            let flags_ok = operands
                .iter()
                .filter(|a| a.starts_with('-'))
                .all(|f| f[1..].chars().all(|c| "1alhAF".contains(c)));
            ("ls", paths.len() == 1 && flags_ok)
        }
        FileOp::Write | FileOp::Append => {
            return Err(Miss {
                depth: 0,
                detail:
                    "a file-writing verb (commands that write files are redirections or editors)"
                        .into(),
            });
        }
    };
    if name != Some(wanted) {
        return Err(Miss {
            depth: 0,
            detail: format!("is a builtin that stands for `{wanted} PATH`"),
        });
    }
    if !ok {
        return Err(Miss {
            depth: 1,
            detail: format!("takes exactly `{wanted} PATH`"),
        });
    }
    let path = argv[1..]
        .iter()
        .find(|a| !a.starts_with('-'))
        .cloned()
        .unwrap_or_default();
    Ok(Candidate {
        args: BTreeMap::from([("path".to_string(), path)]),
        added: Vec::new(),
    })
}

struct Slot<'a> {
    element: &'a ElementTemplate,
    group: Option<usize>,
    option: bool,
    literal_only: bool,
    has_secret: bool,
    /// The bool parameter this element is, with its flag.
    flag: Option<(&'a str, &'a str)>,
    /// An option whose next slot may be its value.
    takes_value: bool,
}

/// The element as written in the template.
pub fn element_text(element: &ElementTemplate) -> String {
    element
        .pieces()
        .iter()
        .map(|p| match p {
            Piece::Literal(t) => t.replace('{', "{{").replace('}', "}}"),
            Piece::Param(n) => format!("{{{n}}}"),
            Piece::Secret(n) => format!("${{secret:{n}}}"),
            Piece::SecretFile(n) => format!("${{secret_file:{n}}}"),
        })
        .collect()
}

fn slots<'a>(template: &'a Template, params: &'a BTreeMap<String, Param>) -> Vec<Slot<'a>> {
    let mut out: Vec<Slot<'a>> = Vec::new();
    for (index, item) in template.items().iter().enumerate() {
        let (members, group): (Vec<&ElementTemplate>, Option<usize>) = match item {
            Item::Element(e) => (vec![e], None),
            Item::Group(g) => (g.iter().collect(), Some(index)),
        };
        for element in members {
            let pieces = element.pieces();
            let flag = element
                .sole_param()
                .and_then(|name| match &params.get(name)?.kind {
                    ParamKind::Bool { flag } => Some((name, flag.as_str())),
                    _ => None,
                });
            let option = matches!(pieces.first(), Some(Piece::Literal(l)) if l.starts_with('-') && l.len() > 1);
            let literal_only = pieces.iter().all(|p| matches!(p, Piece::Literal(_)));
            out.push(Slot {
                element,
                group,
                option,
                literal_only,
                has_secret: pieces
                    .iter()
                    .any(|p| matches!(p, Piece::Secret(_) | Piece::SecretFile(_))),
                flag,
                takes_value: false,
            });
        }
    }
    for i in 0..out.len().saturating_sub(1) {
        let (head, next) = (&out[i], &out[i + 1]);
        let literal = element_text(head.element);
        out[i].takes_value = head.option
            && head.literal_only
            && !literal.contains('=')
            && !next.option
            && next.flag.is_none()
            && head.group == next.group;
    }
    out
}

struct Search<'a> {
    slots: Vec<Slot<'a>>,
    params: &'a BTreeMap<String, Param>,
    words: &'a [String],
    used: Vec<bool>,
    bindings: BTreeMap<String, String>,
    steps: usize,
    best: Miss,
    best_is_validation: bool,
}

fn match_template(
    template: &Template,
    params: &BTreeMap<String, Param>,
    words: &[String],
) -> Result<Candidate, Miss> {
    let slots = slots(template, params);
    let mut search = Search {
        used: vec![false; slots.len()],
        slots,
        params,
        words,
        bindings: BTreeMap::new(),
        steps: 0,
        best: Miss {
            depth: 0,
            detail: "nothing matched".into(),
        },
        best_is_validation: false,
    };
    match search.walk(0, 0) {
        Some(added) => Ok(Candidate {
            args: search.bindings,
            added,
        }),
        None => Err(search.best),
    }
}

impl Search<'_> {
    /// Keep the deepest miss; at equal depth the first validator refusal (the value of the
    /// option just matched) says more than a later or structural one.
    fn miss(&mut self, pos: usize, detail: String, validation: bool) {
        let depth = pos + 1;
        if depth > self.best.depth
            || (depth == self.best.depth && validation && !self.best_is_validation)
        {
            self.best = Miss { depth, detail };
            self.best_is_validation = validation;
        }
    }

    /// Match words from `pos`; positional (non-option) slots must come at or after `floor`.
    /// Returns the elements the verb adds when every word is consumed.
    fn walk(&mut self, pos: usize, floor: usize) -> Option<Vec<String>> {
        self.steps += 1;
        if self.steps > STEP_BUDGET {
            self.miss(pos, "the template is too ambiguous to match".into(), false);
            return None;
        }
        if pos == self.words.len() {
            return self.finish(pos);
        }
        let word = &self.words[pos];
        // A word that is one of the template's literal operands (`get`, `status`) binds to it,
        // never to a parameter that happens to accept the same text.
        let literal_operand = (floor..self.slots.len()).any(|i| {
            !self.used[i]
                && !self.slots[i].option
                && self.slots[i].literal_only
                && element_text(self.slots[i].element) == *word
        });
        for i in 0..self.slots.len() {
            if self.used[i] || (literal_operand && !self.slots[i].literal_only) {
                continue;
            }
            let positional = !self.slots[i].option && self.slots[i].flag.is_none();
            if positional && i < floor {
                continue;
            }
            let saved = self.bindings.clone();
            match self.match_slot(i, word) {
                Ok(()) => {}
                Err(reason) => {
                    // For an option word, "not in its template" says more than a validator.
                    if let Some(reason) = reason
                        && !word.starts_with('-')
                    {
                        self.miss(pos, reason, true);
                    }
                    self.bindings = saved;
                    continue;
                }
            }
            self.used[i] = true;
            // An option with its value right after it.
            if self.slots[i].takes_value
                && !self.used[i + 1]
                && let Some(next_word) = self.words.get(pos + 1)
            {
                let before_value = self.bindings.clone();
                match self.match_slot(i + 1, next_word) {
                    Ok(()) => {
                        self.used[i + 1] = true;
                        if let Some(added) = self.walk(pos + 2, floor) {
                            return Some(added);
                        }
                        self.used[i + 1] = false;
                    }
                    Err(Some(reason)) => self.miss(pos + 1, reason, true),
                    Err(None) => {}
                }
                self.bindings = before_value;
            }
            let next_floor = if positional { i + 1 } else { floor };
            if let Some(added) = self.walk(pos + 1, next_floor) {
                return Some(added);
            }
            self.used[i] = false;
            self.bindings = saved;
        }
        if !word.starts_with('-') || self.best.depth <= pos {
            self.miss(
                pos,
                format!("`{word}` matches no element of its template"),
                false,
            );
        } else {
            self.miss(
                pos,
                format!("the option `{word}` is not in its template"),
                false,
            );
        }
        None
    }

    /// Every word consumed: are the unused slots ones the verb may add?
    fn finish(&mut self, pos: usize) -> Option<Vec<String>> {
        let mut added = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            if self.used[i] || slot.flag.is_some() {
                continue;
            }
            if let Some(g) = slot.group {
                let group_used = self
                    .slots
                    .iter()
                    .zip(&self.used)
                    .any(|(s, used)| *used && s.group == Some(g));
                if !group_used {
                    continue;
                }
                let text = element_text(slot.element);
                self.miss(
                    pos,
                    format!("its optional group needs `{text}` as well"),
                    false,
                );
                return None;
            }
            let defaulted = !slot.literal_only
                && slot.element.params().all(|p| {
                    self.params
                        .get(p)
                        .is_some_and(|param| param.default.is_some())
                });
            let value_of_credential =
                slot.takes_value && self.slots.get(i + 1).is_some_and(|next| next.has_secret);
            // `-v ON_ERROR_STOP=1`: a literal value of a literal option the verb adds.
            let literal_value_of_added_option =
                slot.literal_only && i > 0 && self.slots[i - 1].takes_value && !self.used[i - 1];
            if slot.has_secret
                || value_of_credential
                || (slot.option && slot.literal_only)
                || literal_value_of_added_option
            {
                added.push(element_text(slot.element));
            } else if defaulted {
                let rendered: String = slot
                    .element
                    .pieces()
                    .iter()
                    .map(|p| match p {
                        Piece::Param(n) => self.params[n].default.clone().unwrap_or_default(),
                        Piece::Literal(t) => t.clone(),
                        Piece::Secret(n) | Piece::SecretFile(n) => format!("${{secret:{n}}}"),
                    })
                    .collect();
                added.push(rendered);
            } else {
                let text = element_text(slot.element);
                self.miss(
                    pos,
                    format!("the command lacks `{text}`, which its template requires"),
                    false,
                );
                return None;
            }
        }
        Some(added)
    }

    /// Match one slot against one word, binding parameters. `Err(Some(why))` when the shape
    /// matched but a validator refused the value.
    fn match_slot(&mut self, index: usize, word: &str) -> Result<(), Option<String>> {
        let slot = &self.slots[index];
        if let Some((name, flag)) = slot.flag {
            if word == flag {
                self.bindings.insert(name.to_string(), "true".into());
                return Ok(());
            }
            return Err(None);
        }
        let pieces = slot.element.pieces();
        let mut rejection = None;
        let params = self.params;
        if match_pieces(
            pieces,
            word,
            true,
            params,
            &mut self.bindings,
            &mut rejection,
        ) {
            Ok(())
        } else {
            Err(rejection)
        }
    }
}

/// Match `pieces` against the whole of `word`, binding parameters through their validators.
fn match_pieces(
    pieces: &[Piece],
    word: &str,
    at_start: bool,
    params: &BTreeMap<String, Param>,
    bindings: &mut BTreeMap<String, String>,
    rejection: &mut Option<String>,
) -> bool {
    let Some((first, rest)) = pieces.split_first() else {
        return word.is_empty();
    };
    match first {
        Piece::Literal(l) => word
            .strip_prefix(l.as_str())
            .is_some_and(|tail| match_pieces(rest, tail, false, params, bindings, rejection)),
        Piece::Secret(_) | Piece::SecretFile(_) => ends(word, rest).into_iter().any(|end| {
            end > 0 && match_pieces(rest, &word[end..], false, params, bindings, rejection)
        }),
        Piece::Param(name) => {
            let Some(param) = params.get(name) else {
                return false;
            };
            for end in ends(word, rest) {
                if end == 0 {
                    continue;
                }
                let value = &word[..end];
                if at_start && value.starts_with('-') && !param.allow_dash {
                    // An option the template does not have: the caller reports that.
                    continue;
                }
                let normalized = match param.validate_lexically(value) {
                    Ok(v) => v,
                    Err(e) => {
                        *rejection = Some(format!("`{name}`: {}", e.message));
                        continue;
                    }
                };
                let previous = bindings.get(name).cloned();
                if previous.as_ref().is_some_and(|p| *p != normalized) {
                    continue;
                }
                bindings.insert(name.clone(), normalized);
                if match_pieces(rest, &word[end..], false, params, bindings, rejection) {
                    return true;
                }
                match previous {
                    Some(p) => bindings.insert(name.clone(), p),
                    None => bindings.remove(name),
                };
            }
            false
        }
    }
}

/// Candidate end offsets for a capture followed by `rest`: where the next literal occurs (or
/// the end of the word), longest first.
fn ends(word: &str, rest: &[Piece]) -> Vec<usize> {
    match rest.first() {
        None => vec![word.len()],
        Some(Piece::Literal(l)) => {
            let mut out: Vec<usize> = word.match_indices(l.as_str()).map(|(i, _)| i).collect();
            out.reverse();
            out
        }
        Some(_) => {
            let mut out: Vec<usize> = word.char_indices().map(|(i, _)| i).skip(1).collect();
            out.push(word.len());
            out.reverse();
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
version = 1
[roles.a]
uids = [1]
[secrets.kubeconfig]
env = "KUBECONFIG_TEST"
[verb.logs]
roles = ["a"]
category = "read-only"
command = "/usr/bin/journalctl --no-pager -u {unit} [ -n {lines} ] [ --since {since} ] {reverse}"
params.unit = { type = "systemd-unit" }
params.lines = { type = "int", min = 1, max = 100 }
params.since = { type = "duration", required = false }
params.reverse = { type = "bool", flag = "-r" }
[verb.pods]
roles = ["a"]
category = "read-only"
command = "/usr/local/bin/kubectl --kubeconfig ${secret_file:kubeconfig} -n {namespace} get pods [ -l {selector} ]"
params.namespace = { type = "k8s-name" }
params.selector = { type = "string", pattern = "[a-z]+=[a-z]+", required = false }
[verb.query]
roles = ["a"]
category = "read-only"
command = "/usr/bin/psql -X -v ON_ERROR_STOP=1 -d {db} -c {sql}"
params.db = { type = "string", pattern = "[a-z]+" }
params.sql = { type = "sql" }
[verb.tail]
roles = ["a"]
category = "read-only"
command = "/usr/bin/tail -n {lines} {file}"
params.lines = { type = "int", min = 1, max = 100, default = 20 }
params.file = { type = "enum", values = ["/var/log/syslog"] }
"#;

    fn try_match(verb: &str, line: &str) -> Result<Candidate, Miss> {
        let policy = crate::policy::compile(POLICY, "test").unwrap();
        match_verb(&policy.verbs[verb], &shell_words::split(line).unwrap())
    }

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_in_any_order_operands_in_order() {
        for line in [
            "journalctl -u nginx -n 50",
            "journalctl -n 50 -u nginx",
            "journalctl --no-pager -n 50 -u nginx",
            "/bin/journalctl -u nginx --no-pager -n 50",
        ] {
            let c = try_match("logs", line).unwrap();
            assert_eq!(
                c.args,
                args(&[("unit", "nginx"), ("lines", "50")]),
                "{line}"
            );
        }
        let c = try_match("logs", "journalctl -r -u nginx --since 1h").unwrap();
        assert_eq!(
            c.args,
            args(&[("unit", "nginx"), ("since", "1h"), ("reverse", "true")])
        );
        assert_eq!(c.added, ["--no-pager"]);
    }

    #[test]
    fn validators_and_shape_refuse() {
        // The real validators: a unit that is no unit, an int out of range.
        let miss = try_match("logs", "journalctl -u 'a b'").unwrap_err();
        assert!(miss.detail.contains("`unit`"), "{miss:?}");
        assert!(try_match("logs", "journalctl -u nginx -n 500").is_err());
        // An option the template lacks; an optional group half given; another program.
        let miss = try_match("logs", "journalctl -u nginx -f").unwrap_err();
        assert_eq!(miss.detail, "`-f` matches no element of its template");
        assert!(try_match("logs", "journalctl -u nginx -n").is_err());
        assert!(try_match("logs", "/tmp/journalctl -u nginx").is_err());
        assert_eq!(
            try_match("logs", "less -u nginx").unwrap_err().detail,
            "runs /usr/bin/journalctl"
        );
    }

    #[test]
    fn the_verb_adds_credentials_literal_options_and_defaults() {
        let c = try_match("pods", "kubectl get pods -n web -l app=api").unwrap();
        assert_eq!(
            c.args,
            args(&[("namespace", "web"), ("selector", "app=api")])
        );
        assert_eq!(c.added, ["--kubeconfig", "${secret_file:kubeconfig}"]);
        // The agent's own kubeconfig is replaced by the verb's.
        let c = try_match(
            "pods",
            "kubectl --kubeconfig /root/.kube/config -n web get pods",
        )
        .unwrap();
        assert!(c.added.is_empty());
        let c = try_match("query", "psql -d app -c 'SELECT 1'").unwrap();
        assert_eq!(c.added, ["-X", "-v", "ON_ERROR_STOP=1"]);
        assert!(try_match("query", "psql -d app -c 'DELETE FROM t'").is_err());
        let c = try_match("tail", "tail /var/log/syslog").unwrap();
        assert_eq!(c.added, ["-n", "20"]);
        let c = try_match("tail", "tail -n 5 /var/log/syslog").unwrap();
        assert_eq!(c.args["lines"], "5");
    }
}
