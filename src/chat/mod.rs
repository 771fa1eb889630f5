//! Chat formatting and output decoding: the GGUF's chat template rendered with minijinja into
//! markup and message text kept apart (so message text is never parsed as special tokens), and
//! an incremental UTF-8 decoder for streamed token bytes, and the streaming parser that splits
//! output into content, reasoning and tool calls.

mod control;
mod jinja;
mod native;
mod stop;
mod template;
mod tool_format;
mod tool_text;
mod tools;
mod utf8;

pub use control::{CLOSE as CONTROL_CLOSE, ControlFilter, OPEN as CONTROL_OPEN, unmarked};
pub use stop::{Released, StopMatcher};
pub use template::{
    ChatMessage, ChatTemplate, RenderOptions, Segment, TemplateError, ToolCall, ToolFormat,
};
pub use tools::{Ending, OutputParser, ParserOptions, Piece, valid_name};
pub use utf8::Utf8Stream;
