export OPENAI_BASE_URL=http://127.0.0.1:4000/v1
export ANTHROPIC_BASE_URL=http://127.0.0.1:4000
export LLMGATE_BASE_URL=http://127.0.0.1:4000/v1
export OPENAI_API_KEY=sk-lg-test-0123456789abcdef
export ANTHROPIC_AUTH_TOKEN=sk-lg-test-0123456789abcdef
export LLMGATE_API_KEY=sk-lg-test-0123456789abcdef
export ANTHROPIC_MODEL=qwen2.5-7b-instruct
export LLMGATE_MODEL=qwen2.5-7b-instruct
