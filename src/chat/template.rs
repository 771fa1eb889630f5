//! The model's chat template (Jinja, from the GGUF) rendered with minijinja.
//!
//! Message text must never be tokenized as markup: we render the template with a sentinel in
//! place of each message's content, then split the output at the sentinels. What lies between
//! them is markup (tokenized with specials), each sentinel is replaced by its message text
//! (tokenized as plain text). For ChatML this tokenizes the same as the whole string would,
//! except that markup typed by a user stays text.

use minijinja::{Environment, ErrorKind, context};
use serde::Serialize;

/// ChatML, used when a model carries no template.
const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Private-use code points: no tokenizer merges across them and no user types them by chance;
/// a message that does contain one is refused rather than mis-split.
const SENTINEL_OPEN: char = '\u{F8F0}';
const SENTINEL_CLOSE: char = '\u{F8F1}';

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        Self {
            role: role.to_owned(),
            content: content.to_owned(),
        }
    }
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
}

impl ChatTemplate {
    /// Compiles a template; `None` takes ChatML.
    pub fn new(
        source: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<(), minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_template_owned("chat", source.unwrap_or(CHATML).to_owned())
            .map_err(|e| TemplateError::Compile(e.to_string()))?;
        Ok(Self {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// Renders the messages (with the generation prompt) into segments.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<Vec<Segment>, TemplateError> {
        let mut masked = Vec::with_capacity(messages.len());
        for (index, message) in messages.iter().enumerate() {
            if message.content.contains([SENTINEL_OPEN, SENTINEL_CLOSE]) {
                return Err(TemplateError::ReservedCharacter { index });
            }
            masked.push(ChatMessage {
                role: message.role.clone(),
                content: format!("{SENTINEL_OPEN}{index}{SENTINEL_CLOSE}"),
            });
        }
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| TemplateError::Render(e.to_string()))?;
        let rendered = template
            .render(context! {
                messages => masked,
                add_generation_prompt => true,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(|e| TemplateError::Render(e.to_string()))?;
        Ok(split_at_sentinels(&rendered, messages))
    }
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

    #[test]
    fn a_template_that_raises_reports_its_message() {
        let source = "{{ raise_exception('roles must alternate') }}";
        let template = ChatTemplate::new(Some(source), "", "").unwrap();
        let err = template.render(&[]).unwrap_err().to_string();
        assert!(err.contains("roles must alternate"), "{err}");
    }
}
