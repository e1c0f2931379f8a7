// Package reliability is the reliability suite of issue 19: real
// `llmgate serve` processes on loopback, killed with SIGKILL under load,
// sent bodies that trickle in, and robbed of their database, with each
// test printing its figures. It runs only with LLMGATE_RELIABILITY=1
// (.ci/reliability.sh sets it) and has no non-test code.
package reliability
