// Package cluster holds end-to-end tests of llmgate running as several
// replicas on shared PostgreSQL and Redis: shared limits and budgets,
// revocation reaching every replica, and a usage ledger that survives a
// database outage. It has no non-test code.
package cluster
