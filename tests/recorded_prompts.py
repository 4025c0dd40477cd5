"""The prompts both recorders are checked on (tests/test_record_hf.py, tests/test_record_llama_cpp.py): the same 12,
several repeating text so prompt lookup proposes."""

PROMPTS = [
    "Repeat this sentence twice: the quick brown fox jumps over the lazy dog.",
    "Write the numbers from one to twenty in words, separated by commas.",
    "Copy this list exactly: apples, pears, plums, apples, pears, plums.",
    "Say 'hello world' five times.",
    "What is the capital of France?",
    "def add(a, b):\n    return a + b\n\nRewrite the function above with type hints.",
    "Translate to French: I like cats. I like dogs. I like birds.",
    "List the days of the week.",
    "Spell the word 'banana' letter by letter.",
    "Continue the pattern: red, green, blue, red, green, blue,",
    "Explain what a cache is in one sentence.",
    "Repeat after me: to be or not to be, that is the question.",
]
