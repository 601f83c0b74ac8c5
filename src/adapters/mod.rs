//! Adapters that let agent runtimes reach verbd through their own extension points.
pub mod claude_hook;
