//! Adapters that let agent runtimes reach verbd through their own extension points.
#![forbid(unsafe_code)]
pub mod claude_hook;
pub mod cursor_hook;
pub mod gemini_hook;
pub mod mcp;
