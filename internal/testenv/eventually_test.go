package testenv

import (
	"testing"
	"time"
)

func TestPoll_ReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	took, ok := Poll(5*time.Second, func() bool { n++; return n == 3 })
	if !ok || n != 3 || took > time.Second {
		t.Fatalf("Poll: ok %v after %d checks in %v, want true after 3", ok, n, took)
	}
}

func TestPoll_GivesUpAtTheDeadline(t *testing.T) {
	n := 0
	took, ok := Poll(30*time.Millisecond, func() bool { n++; return false })
	if ok || took < 30*time.Millisecond || took > time.Second || n < 2 {
		t.Fatalf("Poll: ok %v after %d checks in %v, want false after 30ms", ok, n, took)
	}
}
