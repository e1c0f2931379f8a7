package storetest_test

import "os"

// mkTemp makes a directory for a database shared by benchmark runs.
func mkTemp() (string, error) { return os.MkdirTemp("", "llmgate-bench-") }
