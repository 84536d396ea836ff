"""The model call (floor 2 of activities/): the call_llm activity (llm.py), a streamed answer
put back together as its deltas are published (streaming.py), the OpenAI wire format, the
conversation's transcript store, context fitting (tokens, window, budget, prompt fit;
encodings/ holds the tokenizers' files) and prices."""
