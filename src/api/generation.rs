//! What the front ends share after validation: a validated [`Generation`] is tokenized with
//! its tools (or given an autocomplete's own prompt), submitted with its priority, and comes
//! back as a [`Started`] stream with the output parser that sits above every pause.

use super::body::header_priority;
use super::dialect::RouteApi;
use super::grammars::{self, Source};
use super::tools::{OutputPlan, OutputSpec, Wanted};
use super::{ApiError, ApiState, auth};
use crate::chat::{ChatMessage, OutputParser, ParserOptions};
use crate::ids::RequestId;
use crate::service::{RequestOrigin, RequestStream, Route, Sampling, StreamEvent, Submission};
use axum::http::HeaderMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// R13: a stream gets a keep-alive at least this often while it waits.
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// A request, validated, in the terms every front end shares.
#[derive(Debug)]
pub struct Generation {
    pub messages: Vec<ChatMessage>,
    /// The tools offered and the grammar wanted (built in [`submit`], once the prompt fits).
    pub output: OutputPlan,
    pub sampling: Sampling,
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// The body's `priority`, if it gave one (the header and the key's default come next).
    pub priority: Option<i64>,
    /// The API it came in: errors about the output's fields are named in its words.
    pub route: Route,
}

/// A submitted request: its events and the parser for its text.
#[derive(Debug)]
pub struct Started {
    pub id: RequestId,
    pub prompt_tokens: usize,
    pub stream: RequestStream,
    pub parser: OutputParser,
    pub created: u64,
    /// The request's entry in the owners map, removed when the response ends.
    _owned: Option<super::owners::Owned>,
}

/// What a stream yields next: an event, or nothing for a keep-alive period.
#[derive(Debug)]
pub enum Next {
    Event(StreamEvent),
    Idle,
    /// The stream ended without its last event (the service went away).
    Gone,
}

impl Started {
    /// The next event, or [`Next::Idle`] after [`KEEP_ALIVE`] without one.
    pub async fn next_or_idle(&mut self) -> Next {
        match tokio::time::timeout(KEEP_ALIVE, self.stream.next()).await {
            Ok(Some(event)) => Next::Event(event),
            Ok(None) => Next::Gone,
            Err(_) => Next::Idle,
        }
    }
}

/// The priority from the first source that gives one: body, `x-priority`, the API key's
/// default, the route's default (`fim_priority` for an autocomplete) (SCHEDULING.md); clamped
/// and put in scheduler order. Given by any of them, the small-request boost does not apply.
pub fn priority_of(
    state: &ApiState,
    headers: &HeaderMap,
    body: Option<i64>,
    route_default: Option<i64>,
) -> Result<(i32, bool), ApiError> {
    let raw = match body {
        Some(p) => Some(p),
        None => header_priority(headers)?
            .or_else(|| state.key_priority(headers))
            .or(route_default),
    };
    Ok((state.capped_priority(headers, raw), raw.is_some()))
}

/// An autocomplete's default priority in the user's units: `fim_priority`, else
/// [`DEFAULT_FIM_PRIORITY`](crate::config::DEFAULT_FIM_PRIORITY) ahead of chat in the configured
/// order (negated under `lower_first`, where the edge negates it back).
fn fim_priority(state: &ApiState) -> i64 {
    state
        .app
        .fim_priority
        .unwrap_or_else(|| match state.scheduler().priority_order {
            crate::service::PriorityOrder::HigherFirst => crate::config::DEFAULT_FIM_PRIORITY,
            crate::service::PriorityOrder::LowerFirst => -crate::config::DEFAULT_FIM_PRIORITY,
        })
}

/// A generation with its prompt tokenized: what [`submit`] sends.
#[derive(Debug)]
pub struct Prepared {
    generation: Generation,
    prompt: crate::api::Prompt,
    /// An autocomplete (a completion or an infill): plain text out, `fim_priority` by default.
    autocomplete: bool,
}

impl Prepared {
    /// An autocomplete's generation with its prompt as tokens (no template, no tools).
    pub fn autocomplete(generation: Generation, tokens: Vec<crate::ids::TokenId>) -> Self {
        Self {
            generation,
            prompt: crate::api::Prompt {
                tokens,
                starts_in_reasoning: false,
            },
            autocomplete: true,
        }
    }
}

/// Tokenizes the prompt with its tools (CPU work: call it inside [`super::Limits::prepare`]).
pub fn tokenize(state: &ApiState, mut generation: Generation) -> Result<Prepared, ApiError> {
    let messages = normalize(std::mem::take(&mut generation.messages));
    let prompt = state
        .prompts()
        .tokenize(&messages, &generation.output.tools)?;
    Ok(Prepared {
        generation,
        prompt,
        autocomplete: false,
    })
}

/// The output's grammar, built on a preparation place (or taken from the model's cache);
/// none when `skip` (the prompt is refused anyway).
async fn output_of(
    state: &ApiState,
    plan: OutputPlan,
    route: Route,
    skip: bool,
) -> Result<OutputSpec, ApiError> {
    if skip || plan.wanted == Wanted::Nothing {
        return Ok(OutputSpec {
            tools: plan.tools,
            parse_calls: plan.parse_calls,
            grammar: None,
        });
    }
    let prep = state.clone();
    let started = std::time::Instant::now();
    let (output, source) = state
        .limits
        .prepare(move || {
            let prompts = prep.prompts();
            grammars::build(
                plan,
                prompts.tokenizer(),
                prompts.tool_format(),
                &prep.app,
                Some(prompts.grammars()),
            )
        })
        .await
        .map_err(|e| route.rename(e))?;
    let cached = source == Source::Cached;
    state.service().metrics().note_grammar(cached);
    let ms = started.elapsed().as_millis();
    if cached {
        tracing::debug!(
            "output grammar from the cache (built for an earlier request with the same tools) in {ms} ms"
        );
    } else {
        tracing::debug!("output grammar built in {ms} ms");
    }
    Ok(output)
}

/// Who sent a request: the presented API key's `name`, else the User-Agent's product.
fn client_of(state: &ApiState, headers: &HeaderMap) -> String {
    let named = auth::presented_entry(&state.app, headers).and_then(|(_, key)| key.name());
    if let Some(name) = named {
        return name.to_owned();
    }
    headers
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|ua| crate::service::user_agent_product(ua).to_owned())
        .unwrap_or_default()
}

/// Submits a prepared request that came in on `route`; call ids are
/// `{id_prefix}{request}_{n}`.
pub async fn submit(
    state: &ApiState,
    headers: &HeaderMap,
    prepared: Prepared,
    route: Route,
    id_prefix: &str,
) -> Result<Started, ApiError> {
    let Prepared {
        generation,
        prompt,
        autocomplete,
    } = prepared;
    let route_default = autocomplete.then(|| fim_priority(state));
    let (priority, priority_given) =
        priority_of(state, headers, generation.priority, route_default)?;
    let context_tokens = state.service().context_tokens() as usize;
    // a prompt the context cannot take is refused by the scheduler (and logged there) without
    // its grammar ever being built
    let too_long = context_tokens > 0 && prompt.tokens.len() >= context_tokens;
    let unbuilt = too_long && generation.output.wanted != Wanted::Nothing;
    let output = output_of(state, generation.output, generation.route, too_long).await?;
    let mut sampling = generation.sampling;
    sampling.grammar = output.grammar.clone();
    if prompt.starts_in_reasoning
        && let Some(grammar) = &mut sampling.grammar
    {
        grammar.after_reasoning();
    }
    let submission = Submission {
        prompt: prompt.tokens,
        sampling,
        max_tokens: generation.max_tokens,
        stop: generation.stop,
        ignore_eos: generation.ignore_eos,
        priority,
        priority_given,
        origin: RequestOrigin {
            route,
            client: client_of(state, headers),
        },
    };
    let prompt_tokens = submission.prompt.len();
    let stream = state.service().submit(submission).await?;
    if unbuilt {
        // taken after all: the engine changed meanwhile; the grammar it needs was not built
        drop(stream);
        return Err(ApiError::EngineStarting {
            retry_after_secs: 1,
        });
    }
    let id = stream.id;
    let owner = auth::presented_entry(&state.app, headers).map(|(index, _)| index);
    let owned = owner.map(|key| state.owners.record(id, key));
    let call_ids = format!("{id_prefix}{}{}_", boot_nonce(), id.0);
    let parser = if autocomplete {
        OutputParser::plain(&call_ids)
    } else {
        OutputParser::new(
            ParserOptions {
                tools: output.parse_calls,
                starts_in_reasoning: prompt.starts_in_reasoning,
                format: state.prompts().tool_format(),
            },
            &call_ids,
        )
    };
    Ok(Started {
        id,
        prompt_tokens,
        stream,
        parser,
        created: unix_secs(),
        _owned: owned,
    })
}

/// Prompt tokens of `messages` with `tools` offered (Anthropic's `count_tokens`; CPU work:
/// call it inside [`super::Limits::prepare`]).
pub fn count_tokens(
    state: &ApiState,
    messages: Vec<ChatMessage>,
    tools: &[serde_json::Value],
) -> Result<usize, ApiError> {
    let messages = normalize(messages);
    Ok(state.prompts().tokenize(&messages, tools)?.tokens.len())
}

/// One system message first (templates often refuse several, or one later on): leading
/// system messages are joined; a later one (an agent's mid-conversation developer note)
/// becomes a user turn.
pub fn normalize(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    for message in messages {
        let only_system_so_far = out.len() == 1 && out[0].role == "system";
        if message.role == "system" && only_system_so_far {
            out[0].content.push_str("\n\n");
            out[0].content.push_str(&message.content);
        } else if message.role == "system" && !out.is_empty() {
            out.push(ChatMessage::new("user", &message.content));
        } else {
            out.push(message);
        }
    }
    out
}

/// Differs between runs of the server, so call ids from an earlier run never repeat.
fn boot_nonce() -> &'static str {
    static NONCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NONCE.get_or_init(|| format!("{:x}", rand_seed() % 0x1000_0000))
}

/// A seed for requests that give none: different per request.
pub fn rand_seed() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    nanos ^ std::process::id().rotate_left(16)
}

pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A previous answer's leading `<think>…</think>` block taken out of its content: the
/// reasoning (given to the template as the message's reasoning) and the rest.
pub fn split_reasoning(content: &str) -> (Option<String>, &str) {
    let trimmed = content.trim_start();
    match trimmed.strip_prefix("<think>").and_then(|rest| {
        rest.find("</think>")
            .map(|at| (&rest[..at], &rest[at + "</think>".len()..]))
    }) {
        Some((reasoning, rest)) => (Some(reasoning.to_owned()), rest.trim_start()),
        None => (None, content),
    }
}
