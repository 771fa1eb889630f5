//! The tool-call families: how a chat template asks its model to write calls, told from the
//! template's source, and what each family's generation prompt opens.

/// How the loaded template asks the model to write tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (Hermes, Qwen, and this
    /// module's convention for templates that know no tools).
    Hermes,
    /// `<function=NAME><parameter=P>…</parameter></function>` (Qwen3-Coder and others).
    Xml,
    /// gpt-oss's harmony messages: `<|channel|>analysis` reasoning, `to=functions.NAME` calls.
    Harmony,
    /// Mistral's `[TOOL_CALLS]name[ARGS]{...}` (and the `[CALL_ID]` and JSON-array forms).
    Mistral,
    /// Llama 3.x: the whole output a JSON `{"name": ..., "parameters": ...}`.
    Llama3,
    /// GLM 4.x: `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`.
    Glm,
    /// DeepSeek V3.1: `<｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`.
    DeepSeek,
    /// DeepSeek V3.2 / V4: DSML `<｜DSML｜invoke name="f">` with `<｜DSML｜parameter>`s.
    DeepSeekDsml,
    /// Kimi K2: `<|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{...}`.
    Kimi,
    /// Apriel 1.5 / 1.6: `<tool_calls>[{"name", "arguments"}, ...]</tool_calls>`.
    Apriel,
    /// NVIDIA Nemotron Nano v2: `<TOOLCALL>[{"name", "arguments"}, ...]</TOOLCALL>`.
    Nemotron,
    /// Cohere Command R7B and Command A: `<|START_ACTION|>[{"tool_call_id", "tool_name",
    /// "parameters"}, ...]<|END_ACTION|>`.
    Cohere,
    /// Apertus: `<|tools_prefix|>[{"NAME": {...}}, ...]<|tools_suffix|>`.
    Apertus,
    /// IBM Granite 3.x: `<|tool_call|>[{"name", "arguments"}, ...]`.
    Granite3,
    /// MiniMax-M1: `<tool_calls>` and one `{"name", "arguments"}` per line, `</tool_calls>`.
    MiniMaxM1,
    /// GigaChat 3: `function call<|role_sep|>` then one `{"name", "arguments"}`.
    GigaChat3,
    /// GigaChat 3.1: `<|function_call|>{"name", "arguments"}`.
    GigaChat31,
    /// DeepSeek R1 (llama.cpp's template): DeepSeek V3.1's markers, each call
    /// `function<｜tool▁sep｜>NAME` and its arguments in a ```` ```json ```` fence.
    DeepSeekR1,
    /// MiniMax-M2: `<minimax:tool_call>` of `<invoke name="f">` with `<parameter name="k">`s.
    MiniMaxM2,
    /// Muse Glimmer: `<atem:function_calls>` of `<atem:invoke name="f">` with
    /// `<atem:parameter name="k">`s.
    Glimmer,
    /// MiniCPM5: `<function name="f">` with `<param name="k">`s (a string may be CDATA).
    MiniCpm5,
    /// Hy3: GLM's key and value tags with `:opensource`, the name ended by `<tool_sep…>`.
    Hy3,
    /// Solar Open: `<|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}`.
    Solar,
    /// functionary v3.1: `<function=NAME>{...}</function>`.
    Functionary,
    /// Kimi-K3: `<|open|>call tool="f"<|sep|>` with `<|open|>argument key="k" type="…"<|sep|>`s.
    KimiK3,
    /// Gemma 4: `<|tool_call>call:NAME{key:<|"|>text<|"|>}<tool_call|>`.
    Gemma4,
    /// LFM2.5: `<|tool_call_start|>[NAME(key='text'), …]<|tool_call_end|>`.
    Lfm2,
    /// Something else: calls are not parsed.
    Other,
}

impl ToolFormat {
    /// The family a template's source shows (first match wins: some markers appear in several
    /// families' templates); a template that knows no tools gets the Hermes convention.
    pub fn of_template(source: &str) -> Self {
        let has = |s: &str| source.contains(s);
        if !has("tools") {
            Self::Hermes
        } else if has("<|channel|>") && has("<|message|>") {
            Self::Harmony
        } else if has("dsml_token") && has("DSML") {
            Self::DeepSeekDsml
        } else if has("<|tool_calls_section_begin|>") {
            Self::Kimi
        } else if has("<｜tool▁calls▁begin｜>") && !has("```json") {
            Self::DeepSeek
        } else if has("<｜tool▁calls▁begin｜>") {
            Self::DeepSeekR1
        } else if has("[TOOL_CALLS]") {
            Self::Mistral
        } else if has("<function=") && has("<parameter=") {
            Self::Xml
        } else if let Some(format) = Self::of_json_family(source) {
            format
        } else if let Some(format) = Self::of_markup_family(source) {
            format
        } else if has("<arg_key>") {
            Self::Glm
        } else if has("<|start_header_id|>") && has("\"parameters\": ") {
            Self::Llama3
        } else if has("<tool_call>") {
            Self::Hermes
        } else {
            Self::Other
        }
    }
}

impl ToolFormat {
    /// Whether a generation prompt ending in `markup` leaves the output inside the model's
    /// reasoning: `<think>` in most families, the family's own opener in the others.
    pub fn opens_reasoning(self, markup: &str) -> bool {
        let opener = match self {
            Self::Apriel => "Here are my reasoning steps:",
            Self::Cohere => "<|START_THINKING|>",
            Self::Apertus => "<|inner_prefix|>",
            Self::Hy3 => "<think:opensource>",
            Self::Solar => "<|think|>",
            Self::KimiK3 => "<|open|>think<|sep|>",
            Self::Gemma4 => "<|channel>thought",
            _ => "<think>",
        };
        let markup = markup.trim_end();
        markup.ends_with(opener) || markup.ends_with("<think>")
    }

    /// The families whose calls are JSON objects after a marker, by a marker only their
    /// templates hold (checked against the corpus of 71 templates).
    fn of_json_family(source: &str) -> Option<Self> {
        let has = |s: &str| source.contains(s);
        Some(if has("<tool_calls>[") {
            Self::Apriel
        } else if has("<TOOLCALL>") {
            Self::Nemotron
        } else if has("<|START_ACTION|>") {
            Self::Cohere
        } else if has("<|tools_prefix|>") {
            Self::Apertus
        } else if has("<|tool_call|>") {
            Self::Granite3
        } else if has("<beginning_of_sentence>") && has("<tool_calls>") {
            Self::MiniMaxM1
        } else if has("<|function_call|>") {
            Self::GigaChat31
        } else if has("<|role_sep|>") && has("function call") {
            Self::GigaChat3
        } else {
            return None;
        })
    }
}

impl ToolFormat {
    /// The families whose calls are tags, invokes or markers with a name, by a marker only
    /// their templates hold (checked against the corpus of 71 templates).
    fn of_markup_family(source: &str) -> Option<Self> {
        let has = |s: &str| source.contains(s);
        Some(if has("<|tool_call>call:") {
            Self::Gemma4
        } else if has("<|tool_call_start|>") {
            Self::Lfm2
        } else if has("<|open|>") && has("'argument'") {
            Self::KimiK3
        } else if has("<minimax:tool_call>") {
            Self::MiniMaxM2
        } else if has("<atem:invoke") {
            Self::Glimmer
        } else if has("<function name=\"") && has("<param name=\"") {
            Self::MiniCpm5
        } else if has("<tool_sep{}>") && has(":opensource") {
            Self::Hy3
        } else if has("<|tool_call:begin|>") {
            Self::Solar
        } else if has("<function=") && has("</function>") {
            // after the XML form (`<function=` with `<parameter=`), checked earlier
            Self::Functionary
        } else {
            return None;
        })
    }
}
