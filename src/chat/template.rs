//! The model's chat template (Jinja, from the GGUF) rendered with minijinja.
//!
//! Message text must never be tokenized as markup: we render the template with a sentinel in
//! place of each message's content, then split the output at the sentinels. What lies between
//! them is markup (tokenized with specials), each sentinel is replaced by its message text
//! (tokenized as plain text). For ChatML this tokenizes the same as the whole string would,
//! except that markup typed by a user stays text.
//!
//! Tools: a template that knows them (its source mentions `tools`) gets the request's tools and
//! each assistant message's `tool_calls` (name and arguments) and tool message's `name`. For a
//! template that does not, the Hermes convention is written into the messages: the tool
//! signatures into the system message, calls as `<tool_call>{json}</tool_call>` text, results
//! as a user turn of `<tool_response>` blocks. Call ids never enter a prompt, so a
//! conversation's prefix renders the same on every turn.

pub(super) use super::jinja::python_json;
pub use super::tool_format::ToolFormat;
use minijinja::{Environment, context};
use serde::Serialize;
use serde_json::{Value, json};

/// ChatML, used when a model carries no template.
const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Private-use code points: no tokenizer merges across them and no user types them by chance;
/// a message that does contain one is refused rather than mis-split.
const SENTINEL_OPEN: char = '\u{F8F0}';
const SENTINEL_CLOSE: char = '\u{F8F1}';

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant message's calls: names and arguments only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// A tool message: the function that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A tool message: the id of the call it answers, as the client sent it (templates such
    /// as Mistral's render it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An assistant message's reasoning, as the model wrote it; templates get it as
    /// `reasoning_content` (Qwen3, DeepSeek, Kimi) and as `thinking` (gpt-oss) and decide
    /// which turns keep it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// A call as templates see it: `{"type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id as the client sent it back (the one this server gave it, or the model
    /// wrote, as Mistral's models do); rendered only by templates that use ids.
    pub id: Option<String>,
    pub name: String,
    /// A JSON object.
    pub arguments: Value,
}

impl Serialize for ToolCall {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut call = json!({"type": "function", "function": {"name": self.name, "arguments": self.arguments}});
        if let Some(id) = &self.id {
            call["id"] = json!(id);
        }
        call.serialize(s)
    }
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.to_owned(),
            content: content.to_owned(),
            tool_calls: Vec::new(),
            name: None,
            tool_call_id: None,
            reasoning_content: None,
        }
    }
}

/// What a template needs besides the messages.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions<'a> {
    /// OpenAI-shaped tools (`{"type": "function", "function": {...}}`); `None` offers none.
    pub tools: Option<&'a [Value]>,
    /// Leave out the generation prompt (to see how a template writes a finished turn).
    pub without_generation_prompt: bool,
}

/// A piece of a rendered prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Template markup: special tokens allowed.
    Markup(String),
    /// Message text: tokenized as plain text.
    Text(String),
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("the model's chat template does not compile: {0}")]
    Compile(String),
    #[error("the chat template failed to render: {0}")]
    Render(String),
    #[error("message {index} contains a reserved character (U+F8F0 or U+F8F1)")]
    ReservedCharacter { index: usize },
}

#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// The template renders tools and tool calls itself.
    knows_tools: bool,
    tool_format: ToolFormat,
}

impl ChatTemplate {
    /// Compiles a template; `None` takes ChatML.
    pub fn new(
        source: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, TemplateError> {
        let source = source.unwrap_or(CHATML);
        let env =
            super::jinja::environment(source).map_err(|e| TemplateError::Compile(e.to_string()))?;
        Ok(Self {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            knows_tools: source.contains("tools"),
            tool_format: ToolFormat::of_template(source),
        })
    }

    /// How this template asks for tool calls.
    pub fn tool_format(&self) -> ToolFormat {
        self.tool_format
    }

    /// Renders the messages (with the generation prompt) into segments.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<Vec<Segment>, TemplateError> {
        self.render_with(messages, &RenderOptions::default())
    }

    /// Renders the messages with tools (see the module's account).
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        options: &RenderOptions<'_>,
    ) -> Result<Vec<Segment>, TemplateError> {
        for (index, message) in messages.iter().enumerate() {
            if message.content.contains([SENTINEL_OPEN, SENTINEL_CLOSE]) {
                return Err(TemplateError::ReservedCharacter { index });
            }
        }
        let has_tool_parts = messages
            .iter()
            .any(|m| !m.tool_calls.is_empty() || m.role == "tool");
        let rewritten;
        let (messages, tools) = if self.knows_tools || (options.tools.is_none() && !has_tool_parts)
        {
            (messages, options.tools)
        } else {
            rewritten = hermes_messages(messages, options.tools);
            (&rewritten[..], None)
        };
        // tool text the template renders itself stays text (tool_text.rs)
        let mut tool_text = super::tool_text::Masked::default();
        let tools: Option<Vec<Value>> =
            tools.map(|tools| tools.iter().map(|t| tool_text.mask(t)).collect());
        let masked: Vec<ChatMessage> = messages
            .iter()
            .enumerate()
            .map(|(index, message)| ChatMessage {
                // empty stays empty: templates test `if message.content`
                content: if message.content.is_empty() {
                    String::new()
                } else {
                    format!("{SENTINEL_OPEN}{index}{SENTINEL_CLOSE}")
                },
                tool_calls: message
                    .tool_calls
                    .iter()
                    .map(|call| ToolCall {
                        id: call.id.clone(),
                        name: tool_text.mask_str(&call.name),
                        arguments: tool_text.mask(&call.arguments),
                    })
                    .collect(),
                name: message.name.as_deref().map(|n| tool_text.mask_str(n)),
                // reasoning is the model's text: rendered as text, never as markup
                reasoning_content: message
                    .reasoning_content
                    .as_deref()
                    .map(|r| tool_text.mask_str(r)),
                ..message.clone()
            })
            .collect();
        // gpt-oss's template reads reasoning as `thinking`
        let masked: Vec<Value> = masked
            .iter()
            .map(|m| {
                let mut value = serde_json::to_value(m).unwrap_or_default();
                if let Some(reasoning) = &m.reasoning_content {
                    value["thinking"] = Value::from(reasoning.as_str());
                }
                value
            })
            .collect();
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| TemplateError::Render(e.to_string()))?;
        let rendered = template
            .render(context! {
                messages => masked,
                tools => tools,
                add_generation_prompt => !options.without_generation_prompt,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(|e| TemplateError::Render(e.to_string()))?;
        Ok(tool_text.unmask(split_at_sentinels(&rendered, messages)))
    }
}

/// The Hermes convention written into the messages, for templates that know no tools.
fn hermes_messages(messages: &[ChatMessage], tools: Option<&[Value]>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    if let Some(tools) = tools {
        let signatures: Vec<String> = tools
            .iter()
            .map(|t| {
                let mut s = String::new();
                python_json(t, &mut s);
                s
            })
            .collect();
        let block = format!(
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
             You are provided with function signatures within <tools></tools> XML tags:\n\
             <tools>\n{}\n</tools>\n\n\
             For each function call, return a json object with function name and arguments \
             within <tool_call></tool_call> XML tags:\n<tool_call>\n\
             {{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>",
            signatures.join("\n")
        );
        match messages.first() {
            Some(first) if first.role == "system" => {
                out.push(ChatMessage::new(
                    "system",
                    &format!("{}\n\n{block}", first.content),
                ));
            }
            _ => out.push(ChatMessage::new("system", &block)),
        }
    }
    let skip = usize::from(tools.is_some() && messages.first().is_some_and(|m| m.role == "system"));
    for message in &messages[skip..] {
        match message.role.as_str() {
            "tool" => {
                let block = format!("<tool_response>\n{}\n</tool_response>", message.content);
                match out.last_mut() {
                    // Consecutive results share one user turn.
                    Some(last)
                        if last.role == "user" && last.content.ends_with("</tool_response>") =>
                    {
                        last.content.push('\n');
                        last.content.push_str(&block);
                    }
                    _ => out.push(ChatMessage::new("user", &block)),
                }
            }
            _ if !message.tool_calls.is_empty() => {
                let mut content = message.content.clone();
                for call in &message.tool_calls {
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    // Name first, as Hermes-trained models write it.
                    let mut arguments = String::new();
                    python_json(&call.arguments, &mut arguments);
                    let name = Value::from(call.name.as_str());
                    content.push_str(&format!(
                        "<tool_call>\n{{\"name\": {name}, \"arguments\": {arguments}}}\n</tool_call>"
                    ));
                }
                out.push(ChatMessage::new(&message.role, &content));
            }
            _ => out.push(ChatMessage::new(&message.role, &message.content)),
        }
    }
    out
}

fn split_at_sentinels(rendered: &str, messages: &[ChatMessage]) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut rest = rendered;
    while let Some(open) = rest.find(SENTINEL_OPEN) {
        let after = &rest[open + SENTINEL_OPEN.len_utf8()..];
        let Some(close) = after.find(SENTINEL_CLOSE) else {
            break;
        };
        let Some(message) = after[..close]
            .parse::<usize>()
            .ok()
            .and_then(|i| messages.get(i))
        else {
            break;
        };
        if open > 0 {
            segments.push(Segment::Markup(rest[..open].to_owned()));
        }
        if !message.content.is_empty() {
            segments.push(Segment::Text(message.content.clone()));
        }
        rest = &after[close + SENTINEL_CLOSE.len_utf8()..];
    }
    if !rest.is_empty() {
        segments.push(Segment::Markup(rest.to_owned()));
    }
    segments
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders_markup_and_text_apart() {
        let template = ChatTemplate::new(None, "", "").unwrap();
        let segments = template
            .render(&[ChatMessage::new("user", "hi <|im_start|>")])
            .unwrap();
        assert_eq!(
            segments,
            vec![
                Segment::Markup("<|im_start|>user\n".into()),
                Segment::Text("hi <|im_start|>".into()),
                Segment::Markup("<|im_end|>\n<|im_start|>assistant\n".into()),
            ]
        );
    }

    #[test]
    fn a_message_with_a_sentinel_character_is_refused() {
        let template = ChatTemplate::new(None, "", "").unwrap();
        let err = template
            .render(&[ChatMessage::new("user", "a\u{F8F0}b")])
            .unwrap_err();
        assert!(matches!(err, TemplateError::ReservedCharacter { index: 0 }));
    }

    fn text_of(segments: &[Segment]) -> String {
        segments
            .iter()
            .map(|s| match s {
                Segment::Markup(t) | Segment::Text(t) => t.as_str(),
            })
            .collect()
    }

    fn weather_tool() -> Value {
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})
    }

    fn conversation() -> Vec<ChatMessage> {
        let mut call = ChatMessage::new("assistant", "");
        call.tool_calls.push(ToolCall {
            id: None,
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        });
        let mut result = ChatMessage::new("tool", "sunny");
        result.name = Some("get_weather".into());
        vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Weather in Paris?"),
            call,
            result,
        ]
    }

    #[test]
    fn a_template_without_tools_gets_the_hermes_convention_written_into_the_messages() {
        let template = ChatTemplate::new(None, "", "").unwrap();
        let tools = [weather_tool()];
        let options = RenderOptions {
            tools: Some(&tools),
            ..RenderOptions::default()
        };
        let text = text_of(&template.render_with(&conversation(), &options).unwrap());
        assert!(
            text.starts_with("<|im_start|>system\nBe brief.\n\n# Tools"),
            "{text}"
        );
        assert!(text.contains("\"name\": \"get_weather\""), "{text}");
        assert!(text.contains(
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>"
        ), "{text}");
        assert!(
            text.contains("<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>"),
            "{text}"
        );
        // The tool call is message text, never markup.
        let segments = template.render_with(&conversation(), &options).unwrap();
        assert!(
            segments
                .iter()
                .any(|s| matches!(s, Segment::Text(t) if t.starts_with("<tool_call>")))
        );
    }

    #[test]
    fn a_template_that_knows_tools_renders_them_itself_and_never_sees_call_ids() {
        let source = "{% for t in tools %}[tool {{ t.function.name }}]{% endfor %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% for c in m.tool_calls %}(call {{ c.function.name }} {{ c.function.arguments | tojson }}){% endfor %}{% if m.name %}(from {{ m.name }}){% endif %}{% endfor %}";
        let template = ChatTemplate::new(Some(source), "", "").unwrap();
        let tools = [weather_tool()];
        let options = RenderOptions {
            tools: Some(&tools),
            ..RenderOptions::default()
        };
        let text = text_of(&template.render_with(&conversation(), &options).unwrap());
        assert_eq!(
            text,
            "[tool get_weather]<system>Be brief.<user>Weather in Paris?<assistant>(call get_weather {\"city\": \"Paris\"})<tool>sunny(from get_weather)"
        );
    }

    #[test]
    fn the_earlier_turns_render_the_same_when_the_conversation_grows() {
        let template = ChatTemplate::new(None, "", "").unwrap();
        let tools = [weather_tool()];
        let options = RenderOptions {
            tools: Some(&tools),
            ..RenderOptions::default()
        };
        let mut first = conversation();
        first.truncate(2);
        let turn1 = text_of(&template.render_with(&first, &options).unwrap());
        let turn2 = text_of(&template.render_with(&conversation(), &options).unwrap());
        let prefix = turn1.trim_end_matches("<|im_start|>assistant\n");
        assert!(turn2.starts_with(prefix), "{turn1}\n---\n{turn2}");
    }

    #[test]
    fn a_template_that_raises_reports_its_message() {
        let source = "{{ raise_exception('roles must alternate') }}";
        let template = ChatTemplate::new(Some(source), "", "").unwrap();
        let err = template.render(&[]).unwrap_err().to_string();
        assert!(err.contains("roles must alternate"), "{err}");
    }
}
