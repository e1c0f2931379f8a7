package agents

import (
	"os"
	"testing"

	"llmgate/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveSharedLLMGate()
	os.Exit(code)
}
