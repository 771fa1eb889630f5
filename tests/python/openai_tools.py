"""A tool-call round trip with the official `openai` package against a Strata Desk server.

Usage: python openai_tools.py BASE_URL. Prints one JSON object: what the client parsed.
The server runs the simulated engine with a script: a prompt about the weather gets a call
to get_weather; a prompt holding a tool response gets a sentence.
"""

import json
import sys

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused")
tools = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
messages = [{"role": "user", "content": "What is the weather in Paris?"}]

# Streamed: every chunk must parse into the SDK's types; the call is assembled from deltas.
calls = {}
finish = None
chunks = 0
for chunk in client.chat.completions.create(
    model="anything", messages=messages, tools=tools, stream=True, temperature=0
):
    chunks += 1
    choice = chunk.choices[0]
    for delta in choice.delta.tool_calls or []:
        call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
        if delta.id:
            call["id"] = delta.id
        if delta.function and delta.function.name:
            call["name"] += delta.function.name
        if delta.function and delta.function.arguments:
            call["arguments"] += delta.function.arguments
    if choice.finish_reason:
        finish = choice.finish_reason
streamed = [calls[i] for i in sorted(calls)]

# Not streamed: the same call, parsed by the SDK.
whole = client.chat.completions.create(
    model="anything", messages=messages, tools=tools, temperature=0
)
call = whole.choices[0].message.tool_calls[0]

# The round trip: the tool's answer goes back; the model answers in words.
messages.append(
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
        ],
    }
)
messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"})
final = client.chat.completions.create(
    model="anything", messages=messages, tools=tools, temperature=0
)

print(
    json.dumps(
        {
            "streamed": streamed,
            "streamed_finish": finish,
            "chunks": chunks,
            "whole": {
                "id": call.id,
                "name": call.function.name,
                "arguments": json.loads(call.function.arguments),
                "finish": whole.choices[0].finish_reason,
            },
            "final": {
                "content": final.choices[0].message.content,
                "finish": final.choices[0].finish_reason,
                "cached_tokens": final.usage.prompt_tokens_details.cached_tokens,
                "prompt_tokens": final.usage.prompt_tokens,
            },
        }
    )
)
