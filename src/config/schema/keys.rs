//! The table of every config key (see the parent module).

use super::{Applies, Key, Part, key};
use Applies::{Live, NewEngine, Restart};
use Part::{App, Scheduler};

/// Every key, in the order the docs list them.
pub const KEYS: &[Key] = &[
    key(
        "model",
        App,
        NewEngine,
        Some("--model"),
        Some("SmolLM2-135M-Instruct, fetched on first use"),
        "a GGUF path; a path that is missing, not a file, not a GGUF or unreadable is refused \
         naming which",
    ),
    key(
        "engine",
        App,
        Restart,
        Some("--engine"),
        None,
        "`\"llama\"` or `\"sim\"` (simulated engine, labelled so in `/v1/models`, `/health`, the \
         snapshot)",
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
        "parallel",
        App,
        NewEngine,
        Some("--parallel"),
        None,
        "1-64: slots, the requests read or decoded in one step; 2 or more cannot be combined \
         with `solo_priority`",
    ),
    key(
        "kv_sequences",
        App,
        NewEngine,
        Some("--kv-sequences"),
        Some("max(16, `parallel` + 1)"),
        "0, or more than `parallel` and at most 256 (llama.cpp's limit): engine sequences over \
         the one KV pool; every live request and every kept conversation has its own, so this \
         bounds how many conversations stay in the pool. A recurrent or hybrid model gets at \
         most `parallel` + 2",
    ),
    key(
        "ctx",
        App,
        NewEngine,
        Some("--ctx"),
        Some(
            "the largest that fits in memory (the GPU's, else the RAM available less a quarter \
             of the machine's), up to \
             the model's trained context and not below `ctx_min`, by llama.cpp's fitting",
        ),
        "0, or 256-1048576: the KV pool's cells, shared by every sequence, and the most one \
         request holds. Larger than the model's training context it still runs, with a warning \
         in the log. Agents need about 100K for Claude Code (it compacts no earlier than about \
         67K), 32K for Qwen Code, Codex and OpenCode, 8K for aider (section 4, \"Context \
         windows\"). `/health` says the context and how it was chosen (`context_chosen_by`: \
         `set`, `trained`, `fit`, `floor`)",
    ),
    key(
        "ctx_min",
        App,
        NewEngine,
        Some("--ctx-min"),
        None,
        "256-1048576: the floor of a fitted context (`ctx` 0), the smallest context the agent \
         needs (98304 for Claude Code): on a GPU llama.cpp's fitting moves layers to the CPU \
         before the context goes below it; the model's trained context when that is smaller; \
         a floor that does not fit is kept, with a warning in `/health`, the log and the window",
    ),
    key(
        "threads",
        App,
        NewEngine,
        Some("--threads"),
        Some(
            "the physical cores (at most the CPUs the process may use), as llama.cpp; chosen by \
             measurement (docs/BENCHMARKS.md, \"Engine defaults\")",
        ),
        "at most 1024",
    ),
    key(
        "gpu_layers",
        App,
        NewEngine,
        Some("--gpu-layers"),
        None,
        "`\"auto\"`: llama.cpp's own fitting (`common_fit_params`, as llama-server's `--fit`) \
         puts as many layers on the GPU as its free memory holds beside the KV pool of the \
         context (with `ctx` 0, a context fitted first, down to `ctx_min`) and the compute \
         buffers, leaving 1 GiB or a tenth of the GPU free, \
         whichever is more (Windows spills what does not fit into shared memory, about ten \
         times slower); 0 where llama.cpp sees no GPU (a CPU build); if the fitting fails, the \
         CPU only, with a warning. A number sets the layers (more than the model has: all). \
         `/health`, `/v1/scheduler` and the window show the device, the layers and the free \
         memory, and warn when it falls under half the margin",
    ),
    key(
        "gpu_memory_limit",
        App,
        NewEngine,
        Some("--gpu-memory-limit"),
        Some("no limit"),
        "the most GPU memory the engine may take (weights, KV pool, compute buffers), to leave \
         room for the desktop and other programs: a number of MiB, or a size with its unit \
         (`\"6 GiB\"`, `\"512 MiB\"`). `gpu_layers: \"auto\"` fits into it; the memory \
         `/health` and the window show is then what the limit leaves, and the low-memory \
         warning counts from it; a `gpu_layers` count that does not fit gets a warning with \
         the figures",
    ),
    key(
        "device",
        App,
        NewEngine,
        Some("--device"),
        Some("`\"auto\"`"),
        "`\"auto\"`: the GPU with the most free memory (a build with CUDA and Vulkan lists one \
         card under both; two cards are not split: one is used); `\"cpu\"`: every layer on \
         the CPU; or a device llama.cpp lists, by its name (`\"Vulkan0\"`) or description \
         (`\"NVIDIA GeForce RTX 4090\"`), as `/health`'s `engine.device.devices` and the \
         window show them; a device that is not there stops the engine's start with the list \
         of those that are. `/health` and the window say which was picked and why",
    ),
    key(
        "flash_attn",
        App,
        NewEngine,
        Some("--flash-attn"),
        Some("llama.cpp's choice: on, on the CPU"),
        "`\"auto\"`, `\"on\"`, `\"off\"`. `\"off\"` decodes faster on the CPU at several \
         thousand tokens of context (docs/BENCHMARKS.md, \"Engine defaults\") but a paused, \
         parked or batched stream then no longer continues token-identical",
    ),
    key(
        "kv_type",
        App,
        NewEngine,
        Some("--kv-type"),
        None,
        "`\"f16\"`, `\"q8_0\"`; `q8_0` is refused with `flash_attn: \"off\"`",
    ),
    key(
        "swa_full",
        App,
        NewEngine,
        Some("--swa-full"),
        None,
        "`true`: a sliding-window model's (Gemma 3, gpt-oss) window layers keep the whole \
         context, so a conversation continues from any token it shares with a kept one; \
         `false`: they keep their window, as llama.cpp's servers do (Gemma 3 270M at 28K \
         tokens: 1.04-1.06x the decode, 1.09-1.12x the prompt read, a fraction of the window \
         layers' memory), and a kept conversation continues only when the prompt extends it whole \
         (else it is read again). No effect on other models",
    ),
    key(
        "cpu_code",
        App,
        NewEngine,
        Some("--cpu-code"),
        Some("`\"auto\"`"),
        "`\"auto\"`: the best of llama.cpp's CPU variants this CPU runs, passing over those \
         recorded as crashing on it (a variant that dies of an illegal instruction or a bad \
         memory access while the engine warms up is recorded in the data folder's \
         `cpu-code.json`, for this CPU and build, and the next one is started); or a variant's \
         name (`\"zen4\"`, `\"haswell\"`, `strata-desk --version` and `/health` list them): \
         that one, no fallback. An unknown name is refused with the list. `--cpu-code auto` \
         on the command line forgets the record",
    ),
    key(
        "conversation_cache_mib",
        App,
        NewEngine,
        None,
        None,
        "at most 1048576: the host-RAM conversation cache's bound in MiB",
    ),
    key(
        "grammar_ms_per_token",
        App,
        NewEngine,
        None,
        None,
        "between 1 and 5000: the most a request's grammar (tools, `response_format`) may spend \
         choosing one token; past it that request fails alone with a 500 saying so",
    ),
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
