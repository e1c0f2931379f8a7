package engine

import (
	"path/filepath"
	"testing"

	"llmgate/internal/config"
)

func TestParseProcStat_CommWithSpacesAndParens(t *testing.T) {
	// Fields 1-22 of a real line, with a hostile comm.
	line := "4242 (my ) (engine) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 4 0 987654 1000 10 18446744073709551615"
	st, err := parseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.state != 'S' || st.pgid != 4242 || st.start != 987654 {
		t.Fatalf("parsed %+v", st)
	}
	for _, bad := range []string{"", "4242 (x", "4242 (x) S 1 2"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestStatePath_NextToSQLiteDatabase(t *testing.T) {
	for _, c := range []struct {
		db, opt, want string
	}{
		{"/var/lib/llmgate/llmgate.db", "", "/var/lib/llmgate/" + StateFileName},
		{"llmgate.db", "", StateFileName},
		{"/var/lib/llmgate/llmgate.db", "/run/x.json", "/run/x.json"},
		{"/var/lib/llmgate/llmgate.db", "-", ""},
		{"", "", ""},
	} {
		got := statePath(&config.Config{Database: c.db}, Options{StateFile: c.opt})
		if filepath.Clean(got) != filepath.Clean(c.want) && !(got == "" && c.want == "") {
			t.Errorf("database %q, option %q: %q, want %q", c.db, c.opt, got, c.want)
		}
	}
	if got := statePath(&config.Config{Database: "postgres://db/llmgate"}, Options{}); got != "" && filepath.Base(got) != StateFileName {
		t.Errorf("postgres: %q", got)
	}
}
