export OPENAI_BASE_URL=https://gw.example.com/v1
export ANTHROPIC_BASE_URL=https://gw.example.com
export LLMGATE_BASE_URL=https://gw.example.com/v1
# no key: pass --api-key or set LLMGATE_API_KEY to add OPENAI_API_KEY and ANTHROPIC_AUTH_TOKEN
