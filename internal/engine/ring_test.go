package engine

import (
	"fmt"
	"strings"
	"testing"
)

func TestRing_KeepsNewestLinesInOrder(t *testing.T) {
	r := newRing(3)
	r.pump(strings.NewReader("one\ntwo\r\nloading 10%\rloading 50%\nfour\nfive"), "")
	got := r.tail(0, 0)
	var texts []string
	for _, l := range got {
		texts = append(texts, fmt.Sprintf("%d:%s", l.Seq, l.Text))
	}
	if want := "4:loading 50%,5:four,6:five"; strings.Join(texts, ",") != want {
		t.Fatalf("ring holds %v, want %s", texts, want)
	}
	if after := r.tail(0, 5); len(after) != 1 || after[0].Text != "five" {
		t.Fatalf("lines after seq 5: %+v", after)
	}
	if last := r.tail(2, 0); len(last) != 2 || last[0].Text != "four" {
		t.Fatalf("last two lines: %+v", last)
	}
	if s := r.tailText(2); s != "four | five" {
		t.Fatalf("tailText = %q", s)
	}
}

func TestRing_CutsEndlessLines(t *testing.T) {
	r := newRing(2)
	r.pump(strings.NewReader(strings.Repeat("x", 3*maxLineBytes)+"\nok\n"), "")
	lines := r.tail(0, 0)
	if len(lines) != 2 || len(lines[0].Text) != maxLineBytes || lines[1].Text != "ok" {
		t.Fatalf("got %d lines, first %d bytes", len(lines), len(lines[0].Text))
	}
}

func TestChildEnv_DropsMasterKey(t *testing.T) {
	got := childEnv([]string{"PATH=/bin", "LLMGATE_MASTER_KEY=sk-lg-secret", "CUDA_VISIBLE_DEVICES=0"})
	if strings.Join(got, " ") != "PATH=/bin CUDA_VISIBLE_DEVICES=0" {
		t.Fatalf("child environment: %v", got)
	}
}

func TestBackoff_GrowsAndCaps(t *testing.T) {
	for _, c := range []struct {
		crashes int
		want    string
	}{{2, "1s"}, {3, "2s"}, {4, "4s"}, {8, "1m0s"}, {30, "1m0s"}} {
		if got := backoff(c.crashes).String(); got != c.want {
			t.Errorf("backoff(%d) = %s, want %s", c.crashes, got, c.want)
		}
	}
}
