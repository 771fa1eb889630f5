"""The official `openai` (Responses API) and `anthropic` (Messages) packages against a
headless Strata Desk server on the real model, through their high-level helpers, which check
the event grammar as they assemble the answer.

Usage: python agents_real.py BASE_URL. Prints one JSON object: what the clients parsed.
"""

import json
import sys

import anthropic
from openai import OpenAI

base = sys.argv[1]
openai = OpenAI(base_url=base + "/v1", api_key="unused")
created = openai.responses.create(
    model="smollm2", input="Say hello in one short sentence.", max_output_tokens=24,
    temperature=0,
)
with openai.responses.stream(
    model="smollm2", input="Name a colour.", max_output_tokens=200, temperature=0,
    instructions="Answer briefly.",
) as stream:
    deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    streamed = stream.get_final_response()

claude = anthropic.Anthropic(base_url=base, api_key="unused")
message = claude.messages.create(
    model="smollm2", max_tokens=24, system="Answer briefly.",
    messages=[{"role": "user", "content": "Say hello."}],
)
with claude.messages.stream(
    model="smollm2", max_tokens=32000, messages=[{"role": "user", "content": "Name a colour."}],
) as stream:
    text = "".join(stream.text_stream)
    final = stream.get_final_message()
counted = claude.messages.count_tokens(
    model="smollm2", system="Answer briefly.", messages=[{"role": "user", "content": "Say hello."}]
)

print(
    json.dumps(
        {
            "responses": {
                "created": {"status": created.status, "text": created.output_text,
                            "output_tokens": created.usage.output_tokens},
                "streamed": {"status": streamed.status, "text": streamed.output_text,
                             "deltas": deltas},
            },
            "messages": {
                "created": {"text": message.content[0].text, "stop_reason": message.stop_reason,
                            "input_tokens": message.usage.input_tokens
                            + (message.usage.cache_read_input_tokens or 0)},
                "streamed": {"text": final.content[0].text if final.content else "",
                             "stream_text": text, "stop_reason": final.stop_reason},
                "counted": counted.input_tokens,
            },
        }
    )
)
