//! Policy: schema, compilation, typed parameters, templates.
pub mod sql;
