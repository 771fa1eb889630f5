//! The table of every config key (see the parent module).

use super::{Applies, Key, Part, key};
use Applies::{Live, NewEngine, Restart};
use Part::{App, Scheduler};

/// Every key but the engine's (`crate::protocol::ENGINE_KEY_DOCS`), in the order the docs
/// list them.
pub const OTHER_KEYS: &[Key] = &[
    key(
        "engine",
        App,
        Restart,
        Some("--engine"),
        None,
        "`\"llama\"`, `\"sim\"` (simulated engine, labelled so in `/v1/models`, `/health`, the \
         snapshot) or `\"upstream\"` (an existing serving engine at `upstream_url` behind our \
         scheduler; section 8)",
    ),
    key(
        "upstream_url",
        App,
        Restart,
        Some("--upstream"),
        None,
        "`engine: upstream`'s server, an `http://` or `https://` URL (`--upstream URL` also sets \
         `engine: upstream`); refused with `engine: llama` or `sim`",
    ),
    key(
        "upstream_api_key",
        App,
        Restart,
        Some("--upstream-api-key"),
        None,
        "the bearer key the upstream wants (also read from the environment variable \
         STRATA_UPSTREAM_API_KEY); handed to the worker in its environment, never logged; \
         `GET /v1/settings` says only `\"set\"`",
    ),
    key(
        "upstream_kind",
        App,
        Restart,
        Some("--upstream-kind"),
        None,
        "`\"auto\"` (found from the server's routes), `\"llama-server\"`, `\"vllm\"` or \
         `\"sglang\"` (only llama-server is served yet)",
    ),
    key(
        "host",
        App,
        Restart,
        Some("--host"),
        None,
        "an IP address; not loopback requires `api_keys` (section 5)",
    ),
    key("port", App, Restart, Some("--port"), None, "1-65535"),
    key(
        "api_keys",
        App,
        Restart,
        Some("--api-key"),
        None,
        "strings, or `{\"key\": \"...\", \"name\": \"codex\", \"priority\": N, \
         \"max_priority\": M, \"admin\": false}` (all but `key` optional: `name` is shown in \
         logs and the dashboard, `priority` is the default of its requests, `max_priority` \
         caps what they ask, `admin` (default true) lets it use the control routes; `admin: \
         false` may cancel or re-prioritise only its own requests); each key at least 8 \
         characters. `GET /v1/settings` shows their names, never the keys",
    ),
    key(
        "model_aliases",
        App,
        Restart,
        None,
        None,
        "an object of name → string (the values are not read); its names are listed by \
         `/v1/models` and echoed back as the response's `model` (one model is loaded; any name \
         is served)",
    ),
    key(
        "body_limit_mib",
        App,
        Restart,
        None,
        None,
        "1-1024; a larger request body gets 413",
    ),
    key(
        "prepare_concurrency",
        App,
        Restart,
        None,
        Some("the number of cores"),
        "0-1024: requests prepared at once (body parsing, tool schemas, grammars, tokenizing), \
         each on a blocking thread, so the async threads never do this work",
    ),
    key(
        "prepare_waiting_max",
        App,
        Restart,
        None,
        None,
        "1-100000: requests that may wait for a preparation place; one more gets 429 \
         `server_busy`",
    ),
    key(
        "max_tools",
        App,
        Restart,
        None,
        None,
        "1-4096: `tools` one request may offer (Claude Code sends about 20); more is a 400 \
         naming `tools`",
    ),
    key(
        "max_tool_schema_kib",
        App,
        Restart,
        None,
        None,
        "1-65536: one tool's parameter schema, or a `response_format` / `text.format` schema, \
         as JSON text; larger is a 400 naming the field",
    ),
    key(
        "max_grammar_build_steps",
        App,
        Restart,
        None,
        None,
        "1000-4000000000: the estimated work of turning a request's schemas into a grammar \
         (llama.cpp's converter; an object with k optional properties costs about k³/6 steps; \
         the default is about a second here); more is a 400 naming the costliest schema, \
         before any work",
    ),
    key(
        "max_stop_strings",
        App,
        Restart,
        None,
        None,
        "1-256: strings in `stop` / `stop_sequences` (each is matched against every token's \
         text)",
    ),
    key(
        "max_stop_string_bytes",
        App,
        Restart,
        None,
        None,
        "1-65536: the longest stop string",
    ),
    key(
        "header_read_timeout_secs",
        App,
        Restart,
        None,
        None,
        "1-3600: a client must send a request's headers within this, else the connection is \
         closed (an idle keep-alive connection likewise: clients open a new one, as they do \
         with servers that close idle connections after a few seconds)",
    ),
    key(
        "body_read_timeout_secs",
        App,
        Restart,
        None,
        None,
        "1-3600: a client must send the whole body within this, else 408 `request_timeout`",
    ),
    key(
        "event_subscribers_max",
        App,
        Restart,
        None,
        None,
        "1-1024: clients of `/v1/scheduler/events` at once; one more gets 429 `server_busy`",
    ),
    key(
        "fim_priority",
        App,
        Restart,
        None,
        Some("ahead of chat: 5, or -5 with `priority_order: lower_first`"),
        "-1000000..1000000: the priority of an editor's autocomplete (`/v1/completions`, \
         `/v1/fim/completions`, `/infill`) that names none, in `priority_order`'s units; above \
         chat's 0 so a completion is not worthless by the time it arrives (docs/SCHEDULING.md, \
         \"Priority\")",
    ),
    key(
        "tool_call_format",
        App,
        NewEngine,
        None,
        None,
        "`\"auto\"` (the family the chat template shows), or one of `\"hermes\"`, \
         `\"qwen3_coder\"`, `\"harmony\"`, `\"mistral\"`, `\"llama3\"`, `\"glm4\"`, \
         `\"deepseek_v3\"`, `\"deepseek_v32\"`, `\"kimi_k2\"`, `\"granite\"`, `\"apriel\"`, \
         `\"nemotron_v2\"`, `\"cohere\"`, `\"apertus\"`, `\"granite_3\"`, `\"minimax_m1\"`, \
         `\"gigachat3\"`, `\"gigachat3_1\"`, `\"deepseek_r1\"`, `\"minimax_m2\"`, \
         `\"muse_glimmer\"`, `\"minicpm5\"`, `\"hy3\"`, `\"solar_open\"`, `\"kimi_k3\"`, `\"gemma4\"`, `\"lfm2\"`, \
         `\"functionary_v3_1\"`: the form tool calls are parsed in and \
         constrained to (docs/API.md, \"Tools\")",
    ),
    key(
        "allowed_hosts",
        App,
        Restart,
        None,
        None,
        "extra `Host` header names to accept (section 5)",
    ),
    key(
        "cors_origins",
        App,
        Restart,
        None,
        None,
        "web origins allowed at all (CORS, every route, the control routes); any other \
         `Origin` is a 403",
    ),
    key(
        "renderer",
        App,
        Restart,
        Some("--renderer"),
        None,
        "`\"glow\"`, `\"wgpu\"` (needs a `--features wgpu` build); window only",
    ),
    key(
        "close_to_tray",
        App,
        Restart,
        None,
        None,
        "window only: closing the window keeps the server and the engine running, hidden in the \
         tray where a tray host shows the icon (Quit in the tray ends the app), else minimised \
         (each close asks: Minimise, or Quit now); `false`, and closing quits",
    ),
    key(
        "recent_models",
        App,
        Live,
        None,
        None,
        "paths; the window's model picker writes up to 8, newest first",
    ),
    key(
        "solo_priority",
        Scheduler,
        Live,
        Some("--solo-priority"),
        None,
        "preemption (R7): a short or higher-priority request may pause a long stream, which \
         resumes with nothing lost; needs `parallel: 1`. The rollback switch",
    ),
    key(
        "chunk_tokens",
        Scheduler,
        NewEngine,
        Some("--chunk-tokens"),
        Some(
            "measured by the engine at load, about a quarter second of prompt reading (64 \
             tokens on two CPU cores), a multiple of 64",
        ),
        "64-8192",
    ),
    key(
        "yields_max",
        Scheduler,
        Restart,
        None,
        None,
        "at most 16: how many times one read may give way",
    ),
    key(
        "min_run_quantum_secs",
        Scheduler,
        Restart,
        None,
        None,
        "0-3600: a decode runs at least this long before `solo_priority` pauses it",
    ),
    key(
        "aging_interval_secs",
        Scheduler,
        Restart,
        None,
        None,
        "0 (aging off), or 0.001-86400: +1 effective priority per interval waited",
    ),
    key(
        "small_request_tokens",
        Scheduler,
        Restart,
        None,
        None,
        "at most 1000000: with `solo_priority`, a request with no priority and at most this \
         much left to read gets +1",
    ),
    key(
        "queue_max",
        Scheduler,
        Restart,
        None,
        None,
        "1-1000000: waiting requests beyond it get 429",
    ),
    key(
        "priority_range",
        Scheduler,
        Restart,
        None,
        None,
        "`min <= max`, both within -1000000..1000000",
    ),
    key(
        "priority_order",
        Scheduler,
        Restart,
        None,
        None,
        "`\"higher_first\"` or `\"lower_first\"` (vLLM's convention: the number is negated at \
         the edge)",
    ),
    key(
        "give_way",
        Scheduler,
        Live,
        None,
        None,
        "`\"left\"` (by tokens left to read), `\"whole\"` (by whole prompt length), `\"off\"` \
         (never): how a long prompt read gives way to a shorter request at a chunk boundary",
    ),
    key(
        "max_tokens_over_context",
        Scheduler,
        Restart,
        None,
        None,
        "`\"clamp\"` (ends with `length`) or `\"reject\"` (400)",
    ),
    key(
        "max_output_tokens_default",
        Scheduler,
        Restart,
        Some("--max-output-tokens-default"),
        Some("the rest of the context"),
        "1-10000000: the output limit of a request that names none",
    ),
    key(
        "max_output_tokens_cap",
        Scheduler,
        Restart,
        Some("--max-output-tokens-cap"),
        Some("no cap"),
        "1-10000000: the most output tokens any request gets, whatever it asks; a larger limit \
         is cut silently and the request ends with `length`. Agents treat that cut as a failed \
         turn: Codex CLI stops it (\"Incomplete response returned, reason: \
         max_output_tokens\"), Claude Code asks the model to go on, several times over. Set it \
         above what your agents ask (Claude Code asks 32,000), or leave it unset; cuts are \
         counted (`strata_output_cap_cuts` in `/metrics`, the window's counters)",
    ),
    key(
        "output_reserve_tokens",
        Scheduler,
        Restart,
        None,
        None,
        "1-1000000: output cells reserved at admission",
    ),
    key(
        "host_cache_conversations_max",
        Scheduler,
        Restart,
        None,
        None,
        "at most 4096",
    ),
    key(
        "restart_attempts_max",
        Scheduler,
        Restart,
        None,
        None,
        "1-100: failed engine starts in a row before waiting requests get 503 and the engine \
         stays `failed` until a retry (the window's Retry, `POST /v1/engine/restart`, a settings \
         apply); meanwhile arrivals get 503 `engine_unavailable` with the reason and start nothing",
    ),
    key(
        "restart_backoff_secs",
        Scheduler,
        Restart,
        None,
        None,
        "0-600: the wait before the second attempt; doubles for each further one",
    ),
    key(
        "retry_after_secs",
        Scheduler,
        Restart,
        None,
        None,
        "at most 3600: the `Retry-After` of a 429 (a 503 `engine_starting` always says 5)",
    ),
];
