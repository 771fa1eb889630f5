"""Tool round trips with the official `openai` (Responses API) and `anthropic` (Messages)
packages against a Strata Desk server running the simulated engine with a script: a prompt
about the weather gets a call to get_weather; a prompt holding a tool response gets a sentence.

Usage: python agents_tools.py BASE_URL. Prints one JSON object: what the clients parsed.
"""

import json
import sys

import anthropic
from openai import OpenAI

base = sys.argv[1]
question = "What is the weather in Paris?"

# Responses: the streaming helper checks the event grammar and assembles the response.
client = OpenAI(base_url=base + "/v1", api_key="unused")
tools = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
with client.responses.stream(model="anything", input=question, tools=tools) as stream:
    first = stream.get_final_response()
call = next(item for item in first.output if item.type == "function_call")
final = client.responses.create(
    model="anything",
    tools=tools,
    input=[
        {"role": "user", "content": question},
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"},
    ],
)
responses = {
    "call": {"name": call.name, "arguments": json.loads(call.arguments)},
    "final": final.output_text,
}

# Messages: the streaming helper accumulates blocks and parses the tool input.
claude = anthropic.Anthropic(base_url=base, api_key="unused")
a_tools = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
messages = [{"role": "user", "content": question}]
with claude.messages.stream(
    model="claude", max_tokens=1024, messages=messages, tools=a_tools
) as stream:
    message = stream.get_final_message()
use = next(block for block in message.content if block.type == "tool_use")
messages.append({"role": "assistant", "content": [b.model_dump() for b in message.content]})
messages.append(
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}],
    }
)
answer = claude.messages.create(model="claude", max_tokens=1024, messages=messages, tools=a_tools)
print(
    json.dumps(
        {
            "responses": responses,
            "messages": {
                "call": {"name": use.name, "input": use.input},
                "stop_reason": message.stop_reason,
                "final": answer.content[0].text,
            },
        }
    )
)
