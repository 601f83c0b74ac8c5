//! (interim stub until the SQL validator lands: refuses everything)
#![forbid(unsafe_code)]

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlKind {
    Select,
    Explain,
    Values,
    Table,
}

impl std::str::FromStr for SqlKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "select" => Ok(SqlKind::Select),
            "explain" => Ok(SqlKind::Explain),
            "values" => Ok(SqlKind::Values),
            "table" => Ok(SqlKind::Table),
            other => Err(format!("unknown SQL kind {other:?}")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SqlOptions {
    pub allow: Vec<SqlKind>,
    pub deny_functions: Vec<String>,
    pub max_length: usize,
}

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            allow: vec![
                SqlKind::Select,
                SqlKind::Explain,
                SqlKind::Values,
                SqlKind::Table,
            ],
            deny_functions: Vec::new(),
            max_length: 16384,
        }
    }
}

pub struct SqlRejection {
    pub rule: &'static str,
    pub message: String,
}

pub fn validate(_sql: &str, _opts: &SqlOptions) -> Result<(), SqlRejection> {
    Err(SqlRejection {
        rule: "unavailable",
        message: "SQL validation is not available".into(),
    })
}
