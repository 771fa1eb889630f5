//! `strata-desk generate`: one prompt through the real engine worker, streamed to a writer.
//! The simplest driver of the engine (one request, one slot); the service drives it for real.

use crate::chat::{ChatMessage, ChatTemplate, TemplateError, Utf8Stream};
use crate::cli::GenerateArgs;
use crate::engine::{EngineError, EngineProcess, WorkerLaunch};
use crate::engine_worker::WorkerOptions;
use crate::ids::{RequestId, SeqId, TokenId};
use crate::models::{ModelFetchError, ensure_default_model};
use crate::protocol::{Chunk, Command, Reply, Sampling};
use crate::tokenizer::{Tokenizer, TokenizerError};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Model(#[from] ModelFetchError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("the prompt has {prompt_tokens} tokens; the context holds {context_tokens}")]
    PromptTooLong {
        prompt_tokens: usize,
        context_tokens: u32,
    },
    #[error("the engine answered {0}")]
    Unexpected(String),
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

/// What a generation did, for the summary line.
#[derive(Debug, Clone, Default)]
pub struct GenerateReport {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub time_to_first_token_secs: f64,
    pub decode_tokens_per_sec: f64,
    pub finish_reason: &'static str,
}

pub async fn generate(
    args: &GenerateArgs,
    worker_exe: PathBuf,
    out: &mut impl Write,
) -> Result<GenerateReport, GenerateError> {
    let (model, prompt) = model_and_prompt(args)?;
    let options = WorkerOptions::of(crate::protocol::EngineSettings {
        ctx_tokens: args.ctx_tokens,
        threads: args.threads,
        gpu_layers: args.gpu_layers,
        ..crate::protocol::EngineSettings::for_model(model)
    });
    let started = Instant::now();
    // One start: a command-line run reports a worker that cannot start rather than retry.
    let mut process = EngineProcess::start(&WorkerLaunch::new(worker_exe, options), 1).await?;
    let engine = &mut process;
    let handshake = engine.handshake().clone();
    if prompt.len() >= handshake.model.n_ctx as usize {
        return Err(GenerateError::PromptTooLong {
            prompt_tokens: prompt.len(),
            context_tokens: handshake.model.n_ctx,
        });
    }
    let chunk_tokens = if args.chunk_tokens > 0 {
        args.chunk_tokens
    } else {
        handshake.chunk_tokens
    } as usize;
    let request = RequestId(1);
    let sampling = Sampling {
        temperature: args.temperature,
        seed: args.seed,
        ..Sampling::default()
    };
    let deadline = engine.step_deadline(0, 1);
    engine
        .call(
            Command::Open {
                request,
                seq: SeqId(0),
                keep_tokens: 0,
                sampling,
            },
            deadline,
        )
        .await?;

    let asked = Instant::now();
    let mut report = GenerateReport {
        prompt_tokens: prompt.len(),
        ..GenerateReport::default()
    };
    let room = handshake.model.n_ctx as usize - prompt.len();
    let max_tokens = (args.max_tokens as usize).min(room);
    let run = Run {
        prompt: &prompt,
        chunk_tokens,
        max_tokens,
        request,
    };
    let first_token_at = run_steps(engine, &run, &mut report, out).await?;
    let finished = Instant::now();
    if let Some(first) = first_token_at {
        report.time_to_first_token_secs = (first - asked).as_secs_f64();
        let decode_secs = (finished - first).as_secs_f64();
        if decode_secs > 0.0 {
            report.decode_tokens_per_sec = report.generated_tokens as f64 / decode_secs;
        }
    }
    let _ = engine.call(Command::Close { request }, deadline).await;
    process.shutdown().await;
    tracing::debug!(secs = started.elapsed().as_secs_f64(), "generate done");
    Ok(report)
}

/// The model to run (the default one fetched when none is named) and the prompt, rendered
/// by its chat template and tokenized.
fn model_and_prompt(args: &GenerateArgs) -> Result<(PathBuf, Vec<TokenId>), GenerateError> {
    let model = match &args.model {
        Some(path) => path.clone(),
        None => ensure_default_model()?,
    };
    let tokenizer = Tokenizer::load(&model)?;
    let template = ChatTemplate::new(
        tokenizer.chat_template().as_deref(),
        &tokenizer.bos_text(),
        &tokenizer.eos_text(),
    )?;
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(ChatMessage::new("system", system));
    }
    messages.push(ChatMessage::new("user", &args.prompt));
    let prompt = tokenizer.tokenize_segments(&template.render(&messages)?);
    Ok((model, prompt))
}

/// The one request's run: its prompt, read in chunks, and how many tokens it may make.
struct Run<'a> {
    prompt: &'a [TokenId],
    chunk_tokens: usize,
    max_tokens: usize,
    request: RequestId,
}

/// Steps the engine through the prompt's chunks, then decodes until the end of generation
/// or `max_tokens`, writing the text as it comes; when the first token came.
async fn run_steps(
    engine: &mut EngineProcess,
    run: &Run<'_>,
    report: &mut GenerateReport,
    out: &mut impl Write,
) -> Result<Option<Instant>, GenerateError> {
    let mut utf8 = Utf8Stream::new();
    let pieces: Vec<&[i32]> = run.prompt.chunks(run.chunk_tokens).collect();
    let mut first_token_at = None;
    let mut step = 0usize;
    report.finish_reason = "length";
    while report.generated_tokens < run.max_tokens {
        let command = step_command(&pieces, step, run);
        let deadline = engine.step_deadline(pieces.get(step).map_or(0, |p| p.len()), 1);
        step += 1;
        let Reply::StepDone(done) = engine.call(command, deadline).await? else {
            return Err(GenerateError::Unexpected(
                "a reply that is not a step".into(),
            ));
        };
        let Some(sampled) = done.sampled.into_iter().find(|s| s.request == run.request) else {
            continue;
        };
        first_token_at.get_or_insert_with(Instant::now);
        if sampled.eog {
            report.finish_reason = "stop";
            break;
        }
        report.generated_tokens += 1;
        out.write_all(crate::chat::unmarked(&utf8.push(&sampled.bytes)).as_bytes())?;
        out.flush()?;
    }
    out.write_all(utf8.finish().as_bytes())?;
    out.flush()?;
    Ok(first_token_at)
}

/// Step `step`'s command: the prompt's next chunk while there is one, else a decode.
fn step_command(pieces: &[&[i32]], step: usize, run: &Run<'_>) -> Command {
    match pieces.get(step) {
        Some(piece) => Command::Step {
            chunk: Some(Chunk {
                request: run.request,
                start: (step * run.chunk_tokens) as u32,
                tokens: piece.to_vec(),
                last: step + 1 == pieces.len(),
                prompt_tokens: pieces.iter().map(|p| p.len() as u32).sum(),
            }),
            decode: vec![],
        },
        None => Command::Step {
            chunk: None,
            decode: vec![run.request],
        },
    }
}
