//go:build !linux

package engine_test

import (
	"fmt"
	"os"
)

// runGatewayHelper is used by the Linux-only parent-death test.
func runGatewayHelper() int {
	fmt.Fprintln(os.Stderr, "the gateway helper runs on Linux only")
	return 1
}
