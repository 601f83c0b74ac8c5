//! Command templates: parsed once at policy load, rendered per call into a [`RenderedArgv`].
//!
//! Syntax (documented in docs/policy.md):
//! - A template is a TOML array of argv elements, or one string split with `shell-words` at load
//!   time. The first element is the program: a literal absolute path.
//! - `{name}` substitutes parameter `name` *inside one element*. A value is never re-split and no
//!   shell ever sees it. `{{` and `}}` are literal braces.
//! - `${secret:NAME}` substitutes a secret's value at exec time; `${secret_file:NAME}` substitutes
//!   the path of a private per-call copy of it. Rendered argv shown to people keeps the placeholder.
//! - A `path` parameter renders as a [`PathArg`]: shown as the validated path, handed to the
//!   child as `/proc/self/fd/N` of the descriptor the executor pins (see `crate::pinned`). It
//!   ends its element, after nothing but an option's name (checked at load with
//!   [`ElementTemplate::misplaced_path`]): text after it would be a name the program resolves
//!   itself, below the pinned entry.
//! - A bool parameter must be a whole element `{flag}`: it renders as its flag, or vanishes.
//! - `[` and `]` as whole elements delimit an optional group: the group is rendered only when every
//!   non-bool parameter inside it has a value (`[ --since {since} ]`). Groups do not nest. An
//!   optional parameter without a default may only appear inside a group.
//!
//! Invariant (option injection): when a substituted value starts an element and begins with `-`,
//! rendering refuses it unless the parameter sets `allow_dash`.
#![forbid(unsafe_code)]

use super::params::{Param, ParamKind, ParamRejection, PathCheck, root_of};
use crate::pinned::Resolution;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One piece of an element template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Literal(String),
    Param(String),
    Secret(String),
    SecretFile(String),
}

/// The template of one argv element (or one env value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementTemplate {
    pieces: Vec<Piece>,
}

/// One top-level part of a template after the program: an element, or an optional group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Element(ElementTemplate),
    Group(Vec<ElementTemplate>),
}

/// A parsed command template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    program: PathBuf,
    items: Vec<Item>,
    /// The elements as written, for display and for comparing templates across reloads.
    source: Vec<String>,
}

/// Why a template could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("cannot split the command into words: {0}")]
    Split(String),
    #[error("the command is empty")]
    Empty,
    #[error("the program {0:?} must be a literal absolute path (no placeholders, no PATH lookup)")]
    ProgramNotAbsolute(String),
    #[error("element {element:?}: {problem}")]
    Element { element: String, problem: String },
    #[error("unbalanced `[`/`]` group markers (groups cannot nest; a `[` needs its `]`)")]
    UnbalancedGroup,
    #[error("an empty `[ ]` group")]
    EmptyGroup,
}

/// One piece of a rendered element: text, a secret still to be resolved at exec time, or a
/// validated path parameter that the executor pins again and hands over as a descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgPart {
    Text(String),
    Secret(String),
    SecretFile(String),
    Path(PathArg),
}

/// A path parameter as validated: the path, the root it was resolved beneath, and what it
/// resolved to. The executor refuses the run if it resolves to anything else then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathArg {
    pub path: PathBuf,
    pub root: PathBuf,
    pub resolution: Resolution,
}

/// One rendered argv element or env value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedArg {
    parts: Vec<ArgPart>,
}

impl RenderedArg {
    pub fn parts(&self) -> &[ArgPart] {
        &self.parts
    }

    /// The element with secrets shown as their placeholders (safe to show and journal).
    pub fn display(&self) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                ArgPart::Text(t) => t.clone(),
                ArgPart::Secret(n) => format!("${{secret:{n}}}"),
                ArgPart::SecretFile(n) => format!("${{secret_file:{n}}}"),
                ArgPart::Path(p) => p.path.display().to_string(),
            })
            .collect()
    }
}

/// An argv produced by the policy layer from a template and validated arguments. The executor
/// accepts nothing else: it cannot be built from raw strings outside this module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedArgv {
    program: PathBuf,
    args: Vec<RenderedArg>,
}

impl RenderedArgv {
    pub fn program(&self) -> &Path {
        &self.program
    }

    pub fn args(&self) -> &[RenderedArg] {
        &self.args
    }

    /// Program and arguments with secrets as placeholders.
    pub fn display(&self) -> Vec<String> {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().map(RenderedArg::display))
            .collect()
    }

    /// Each path parameter with what it resolved to at validation, e.g.
    /// `/srv/data/a.txt → file (device 259:1, inode 1234)`: shown to approvers, and compared
    /// when an approved call is evaluated again.
    pub fn pins(&self) -> Vec<String> {
        self.args
            .iter()
            .flat_map(|a| a.parts.iter())
            .filter_map(|p| match p {
                ArgPart::Path(p) => Some(format!("{} → {}", p.path.display(), p.resolution)),
                _ => None,
            })
            .collect()
    }
}

impl ElementTemplate {
    /// Parse one element: literals, `{param}`, `${secret:NAME}`, `${secret_file:NAME}`, `{{`, `}}`.
    pub fn parse(text: &str) -> Result<ElementTemplate, TemplateError> {
        let bad = |problem: String| TemplateError::Element {
            element: text.to_string(),
            problem,
        };
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if let Some(after) = rest.strip_prefix("{{") {
                literal.push('{');
                rest = after;
            } else if let Some(after) = rest.strip_prefix("}}") {
                literal.push('}');
                rest = after;
            } else if let Some(after) = rest.strip_prefix("${") {
                let end = after
                    .find('}')
                    .ok_or_else(|| bad("`${` without a closing `}`".into()))?;
                let inner = &after[..end];
                let piece = if let Some(name) = inner.strip_prefix("secret:") {
                    Piece::Secret(check_name(name).map_err(&bad)?.into())
                } else if let Some(name) = inner.strip_prefix("secret_file:") {
                    Piece::SecretFile(check_name(name).map_err(&bad)?.into())
                } else {
                    return Err(bad(format!(
                        "unknown placeholder `${{{inner}}}` (only ${{secret:NAME}} and ${{secret_file:NAME}} exist)"
                    )));
                };
                flush(&mut literal, &mut pieces);
                pieces.push(piece);
                rest = &after[end + 1..];
            } else if let Some(after) = rest.strip_prefix('{') {
                let end = after.find('}').ok_or_else(|| {
                    bad("`{` without a closing `}` (write `{{` for a literal brace)".into())
                })?;
                let name = check_name(&after[..end]).map_err(&bad)?;
                flush(&mut literal, &mut pieces);
                pieces.push(Piece::Param(name.into()));
                rest = &after[end + 1..];
            } else if c == '}' {
                return Err(bad("a lone `}` (write `}}` for a literal brace)".into()));
            } else {
                literal.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        flush(&mut literal, &mut pieces);
        Ok(ElementTemplate { pieces })
    }

    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// The parameter names this element uses.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Param(n) => Some(n.as_str()),
            _ => None,
        })
    }

    /// The secret names this element uses (both kinds).
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Secret(n) | Piece::SecretFile(n) => Some(n.as_str()),
            _ => None,
        })
    }

    /// Why a path parameter of this element would not reach the program as exactly the pinned
    /// entry, if it would not (`is_path` says which parameters are paths). The program gets
    /// `/proc/self/fd/N` in place of the value: anything after it in the same element
    /// (`{dir}/config`, `{dir}{name}`) would be a name the program resolves below the pinned
    /// entry, unchecked, and text before it may only be an option's name or a separator
    /// (`--file=`, `-f`, `@`), never the start of a longer path (`/mnt{path}`, `.{path}`).
    pub fn misplaced_path(&self, is_path: impl Fn(&str) -> bool) -> Option<String> {
        let (index, name) = self.pieces.iter().enumerate().find_map(|(i, p)| match p {
            Piece::Param(n) if is_path(n) => Some((i, n)),
            _ => None,
        })?;
        if index + 1 < self.pieces.len() {
            return Some(format!(
                "text after path parameter `{name}` would be resolved by the program below the pinned entry, never checked; make the whole path the parameter (its own element, or after an option's `=`)"
            ));
        }
        match &self.pieces[..index] {
            [] => None,
            [Piece::Literal(prefix)] if is_option_prefix(prefix) => None,
            _ => Some(format!(
                "text before path parameter `{name}` must end with `=`, `:`, `,` or `@`, or be a one-letter option such as `-f`: anything else would make the program open a different path than the one checked"
            )),
        }
    }

    /// The element as written in the policy (placeholders and escaped braces restored).
    pub fn text(&self) -> String {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Literal(t) => t.replace('{', "{{").replace('}', "}}"),
                Piece::Param(n) => format!("{{{n}}}"),
                Piece::Secret(n) => format!("${{secret:{n}}}"),
                Piece::SecretFile(n) => format!("${{secret_file:{n}}}"),
            })
            .collect()
    }

    /// The parameter this element is, when it is exactly `{name}`.
    pub fn sole_param(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [Piece::Param(n)] => Some(n),
            _ => None,
        }
    }

    /// Render with validated, normalized args. `None` means "this element vanishes" (a false
    /// bool flag).
    pub fn render(
        &self,
        params: &BTreeMap<String, Param>,
        args: &BTreeMap<String, String>,
        path_check: PathCheck,
    ) -> Result<Option<RenderedArg>, ParamRejection> {
        if let Some(name) = self.sole_param()
            && let Some(flag) = params.get(name).and_then(|p| match &p.kind {
                ParamKind::Bool { flag } => Some(flag),
                _ => None,
            })
        {
            return Ok(
                (args.get(name).map(String::as_str) == Some("true")).then(|| RenderedArg {
                    parts: vec![ArgPart::Text(flag.clone())],
                }),
            );
        }
        let mut parts: Vec<ArgPart> = Vec::new();
        for (index, piece) in self.pieces.iter().enumerate() {
            match piece {
                Piece::Literal(t) => push_text(&mut parts, t),
                Piece::Param(name) => {
                    let value = args.get(name).ok_or_else(|| ParamRejection {
                        param: name.clone(),
                        rule: "missing",
                        message: format!(
                            "REQUIRES_CLARIFICATION: missing required parameters: {name}"
                        ),
                    })?;
                    let param = params.get(name);
                    let allow_dash = param.is_some_and(|p| p.allow_dash);
                    if index == 0 && value.starts_with('-') && !allow_dash {
                        return Err(ParamRejection {
                            param: name.clone(),
                            rule: "option-injection",
                            message: format!(
                                "{value:?} starts with `-` and would be read as an option by the program"
                            ),
                        });
                    }
                    match param.map(|p| &p.kind) {
                        Some(ParamKind::Path { roots, .. })
                            if path_check == PathCheck::OnThisHost =>
                        {
                            parts.push(ArgPart::Path(pin_path(name, value, roots)?))
                        }
                        _ => push_text(&mut parts, value),
                    }
                }
                Piece::Secret(n) => parts.push(ArgPart::Secret(n.clone())),
                Piece::SecretFile(n) => parts.push(ArgPart::SecretFile(n.clone())),
            }
        }
        Ok(Some(RenderedArg { parts }))
    }
}

/// Resolves a validated path parameter beneath its root (again: this is the resolution the run
/// will insist on).
fn pin_path(name: &str, value: &str, roots: &[PathBuf]) -> Result<PathArg, ParamRejection> {
    let path = Path::new(value);
    let refuse = |rule: &'static str, message: String| ParamRejection {
        param: name.to_string(),
        rule,
        message,
    };
    let root = root_of(roots, path).ok_or_else(|| {
        refuse(
            "path-root",
            format!("{value:?} is not under an allowed root"),
        )
    })?;
    let resolution = crate::pinned::resolve(root, path).map_err(|e| {
        refuse(
            "path-changed",
            format!("{e} (it changed while the call was checked)"),
        )
    })?;
    Ok(PathArg {
        path: path.to_path_buf(),
        root: root.to_path_buf(),
        resolution,
    })
}

/// May `prefix` come right before a path in one element: an option's name and its separator
/// (`--out=`, `-f`, `file:`, `@`)?
fn is_option_prefix(prefix: &str) -> bool {
    let short_option = prefix.len() == 2
        && prefix.starts_with('-')
        && prefix.as_bytes()[1].is_ascii_alphanumeric();
    short_option || prefix.ends_with(['=', ':', ',', '@'])
}

fn push_text(parts: &mut Vec<ArgPart>, text: &str) {
    if let Some(ArgPart::Text(last)) = parts.last_mut() {
        last.push_str(text);
    } else {
        parts.push(ArgPart::Text(text.to_string()));
    }
}

fn flush(literal: &mut String, pieces: &mut Vec<Piece>) {
    if !literal.is_empty() {
        pieces.push(Piece::Literal(std::mem::take(literal)));
    }
}

fn check_name(name: &str) -> Result<&str, String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(name)
    } else {
        Err(format!(
            "bad placeholder name {name:?} (letters, digits, `_` and `-`, starting with a letter)"
        ))
    }
}

impl Template {
    /// Parse a template from its elements (already split).
    pub fn parse(elements: Vec<String>) -> Result<Template, TemplateError> {
        let (first, rest) = elements.split_first().ok_or(TemplateError::Empty)?;
        let program = ElementTemplate::parse(first)?;
        let program = match program.pieces.as_slice() {
            [Piece::Literal(p)] if Path::new(p).is_absolute() => PathBuf::from(p),
            _ => return Err(TemplateError::ProgramNotAbsolute(first.clone())),
        };
        let mut items = Vec::new();
        let mut group: Option<Vec<ElementTemplate>> = None;
        for element in rest {
            match (element.as_str(), &mut group) {
                ("[", None) => group = Some(Vec::new()),
                ("[", Some(_)) => return Err(TemplateError::UnbalancedGroup),
                ("]", None) => return Err(TemplateError::UnbalancedGroup),
                ("]", Some(_)) => {
                    let members = group.take().unwrap_or_default();
                    if members.is_empty() {
                        return Err(TemplateError::EmptyGroup);
                    }
                    items.push(Item::Group(members));
                }
                (text, Some(members)) => members.push(ElementTemplate::parse(text)?),
                (text, None) => items.push(Item::Element(ElementTemplate::parse(text)?)),
            }
        }
        if group.is_some() {
            return Err(TemplateError::UnbalancedGroup);
        }
        Ok(Template {
            program,
            items,
            source: elements,
        })
    }

    /// Split a one-line template with shell-words (once, at load time) and parse it.
    pub fn parse_line(line: &str) -> Result<Template, TemplateError> {
        let words = shell_words::split(line).map_err(|e| TemplateError::Split(e.to_string()))?;
        Template::parse(words)
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The parsed structure after the program (what `verbd policy coverage` matches against).
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// The elements as written (after splitting).
    pub fn source(&self) -> &[String] {
        &self.source
    }

    /// Every element template with whether it sits inside an optional group.
    pub fn elements(&self) -> impl Iterator<Item = (&ElementTemplate, bool)> {
        self.items.iter().flat_map(|item| match item {
            Item::Element(e) => vec![(e, false)],
            Item::Group(g) => g.iter().map(|e| (e, true)).collect(),
        })
    }

    /// Render with validated, normalized args (defaults already applied). With
    /// [`PathCheck::Lexical`] a path parameter stays text (not pinned): never for a run.
    pub fn render(
        &self,
        params: &BTreeMap<String, Param>,
        args: &BTreeMap<String, String>,
        path_check: PathCheck,
    ) -> Result<RenderedArgv, ParamRejection> {
        let mut rendered = Vec::new();
        for item in &self.items {
            match item {
                Item::Element(e) => rendered.extend(e.render(params, args, path_check)?),
                Item::Group(members) => {
                    let complete = members.iter().flat_map(ElementTemplate::params).all(|n| {
                        args.contains_key(n) || params.get(n).is_some_and(|p| p.kind.is_bool())
                    });
                    if complete {
                        for e in members {
                            rendered.extend(e.render(params, args, path_check)?);
                        }
                    }
                }
            }
        }
        Ok(RenderedArgv {
            program: self.program.clone(),
            args: rendered,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::params::ParamKind;

    fn params() -> BTreeMap<String, Param> {
        let mk = |name: &str, kind: ParamKind| Param {
            name: name.into(),
            description: String::new(),
            kind,
            required: false,
            default: None,
            allow_dash: false,
        };
        [
            mk("unit", ParamKind::SystemdUnit),
            mk("since", ParamKind::Duration { max: None }),
            mk(
                "follow",
                ParamKind::Bool {
                    flag: "--follow".into(),
                },
            ),
        ]
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect()
    }

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A path judged lexically (history from another host) is rendered as text and never
    /// opened here; on this host the same path must exist and is pinned.
    #[test]
    fn a_lexically_checked_path_is_never_opened_on_this_host() {
        let mut p = params();
        let gone = "/nonexistent-verbd-test/file.log";
        p.insert(
            "file".into(),
            Param {
                name: "file".into(),
                description: String::new(),
                kind: ParamKind::Path {
                    roots: vec![PathBuf::from("/")],
                    create: false,
                    opened_by: crate::policy::params::PathOpener::Child,
                },
                required: true,
                default: None,
                allow_dash: false,
            },
        );
        let t = Template::parse_line("/bin/cat {file}").unwrap();
        let rendered = t
            .render(&p, &args(&[("file", gone)]), PathCheck::Lexical)
            .unwrap();
        assert_eq!(rendered.display(), ["/bin/cat", gone]);
        assert!(
            t.render(&p, &args(&[("file", gone)]), PathCheck::OnThisHost)
                .is_err()
        );
    }

    /// Placeholder names: a letter or `_` first, then letters, digits, `_` and `-`, at most 64.
    #[test]
    fn placeholder_names_follow_one_rule() {
        for good in ["{_x}", "{a}", "{a-b_9}", &format!("{{{}}}", "n".repeat(64))] {
            assert!(
                Template::parse_line(&format!("/bin/x {good}")).is_ok(),
                "{good}"
            );
        }
        for bad in [
            "{9a}",
            "{-a}",
            "{a.b}",
            "{}",
            &format!("{{{}}}", "n".repeat(65)),
        ] {
            assert!(
                Template::parse_line(&format!("/bin/x {bad}")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn values_stay_inside_one_element() {
        let t = Template::parse_line("/usr/bin/journalctl -u {unit} --since=-{since}").unwrap();
        let r = t
            .render(
                &params(),
                &args(&[("unit", "a b; id"), ("since", "5m")]),
                PathCheck::OnThisHost,
            )
            .unwrap();
        assert_eq!(
            r.display(),
            ["/usr/bin/journalctl", "-u", "a b; id", "--since=-5m"]
        );
    }

    #[test]
    fn groups_and_flags() {
        let t = Template::parse_line("/bin/j -u {unit} [ --since {since} ] {follow}").unwrap();
        let p = params();
        let r = t
            .render(&p, &args(&[("unit", "x")]), PathCheck::OnThisHost)
            .unwrap();
        assert_eq!(r.display(), ["/bin/j", "-u", "x"]);
        let r = t
            .render(
                &p,
                &args(&[("unit", "x"), ("since", "1h"), ("follow", "true")]),
                PathCheck::OnThisHost,
            )
            .unwrap();
        assert_eq!(
            r.display(),
            ["/bin/j", "-u", "x", "--since", "1h", "--follow"]
        );
    }

    #[test]
    fn option_injection_refused_at_element_start_only() {
        let t = Template::parse_line("/bin/x {unit} --unit={unit}").unwrap();
        let err = t
            .render(&params(), &args(&[("unit", "-rf")]), PathCheck::OnThisHost)
            .unwrap_err();
        assert_eq!(err.rule, "option-injection");
        let t = Template::parse_line("/bin/x --unit={unit}").unwrap();
        assert!(
            t.render(&params(), &args(&[("unit", "-rf")]), PathCheck::OnThisHost)
                .is_ok()
        );
    }

    #[test]
    fn secrets_render_as_placeholders() {
        let t = Template::parse(vec![
            "/usr/bin/kubectl".into(),
            "--kubeconfig".into(),
            "${secret_file:kube}".into(),
            "--token=${secret:tok}".into(),
            "{{literal}}".into(),
        ])
        .unwrap();
        let r = t
            .render(&params(), &BTreeMap::new(), PathCheck::OnThisHost)
            .unwrap();
        assert_eq!(
            r.display(),
            [
                "/usr/bin/kubectl",
                "--kubeconfig",
                "${secret_file:kube}",
                "--token=${secret:tok}",
                "{literal}"
            ]
        );
    }

    #[test]
    fn a_path_parameter_ends_its_element_after_at_most_an_option_name() {
        let misplaced = |element: &str| {
            ElementTemplate::parse(element)
                .unwrap()
                .misplaced_path(|p| p == "file")
        };
        for fine in [
            "{file}",
            "--out={file}",
            "-f{file}",
            "@{file}",
            "file:{file}",
            "{unit}x",
        ] {
            assert_eq!(misplaced(fine), None, "{fine}");
        }
        for (bad, said) in [
            ("{file}/config", "text after path parameter `file`"),
            ("{file}{unit}", "text after path parameter `file`"),
            ("{file}${secret:tok}", "text after path parameter `file`"),
            ("/mnt{file}", "text before path parameter `file`"),
            (".{file}", "text before path parameter `file`"),
            ("--x{file}", "text before path parameter `file`"),
            ("{unit}={file}", "text before path parameter `file`"),
        ] {
            let problem = misplaced(bad).unwrap_or_else(|| panic!("{bad} was accepted"));
            assert!(problem.contains(said), "{bad}: {problem}");
        }
        let element = ElementTemplate::parse("{{x}}-{file}/${secret:tok}").unwrap();
        assert_eq!(element.text(), "{{x}}-{file}/${secret:tok}");
    }

    #[test]
    fn parse_errors() {
        assert_eq!(
            Template::parse_line("echo hi").unwrap_err(),
            TemplateError::ProgramNotAbsolute("echo".into())
        );
        assert!(Template::parse_line("/bin/{x}").is_err());
        assert!(Template::parse_line("/bin/x {unclosed").is_err());
        assert!(Template::parse_line("/bin/x [ a").is_err());
        assert!(Template::parse_line("/bin/x ]").is_err());
        assert!(Template::parse_line("/bin/x ${env:HOME}").is_err());
        assert!(Template::parse_line("/bin/x 'unterminated").is_err());
    }
}
