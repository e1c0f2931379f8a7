package main

import (
	"flag"
	"os"
	"testing"

	"llmgate/internal/testenv"
)

func TestMain(m *testing.M) {
	flag.Parse()
	testenv.PrefetchSharedLLMGate() // TestVersion_LdflagsStampReachesTheBinary runs it
	code := m.Run()
	testenv.RemoveSharedLLMGate()
	os.Exit(code)
}
