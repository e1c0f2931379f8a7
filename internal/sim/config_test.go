package sim

import (
	"strings"
	"testing"
	"time"
)

func TestPresets_BiggerModelsAreSlower(t *testing.T) {
	p := Presets()
	small, big, qwen3 := p["qwen2.5-7b-instruct"], p["qwen2.5-32b-instruct"], p["qwen3-32b"]
	itl := func(m ModelConfig) time.Duration { return m.DecodeBase + m.DecodePerSeq }
	if !(itl(small) < itl(big) && itl(big) <= itl(qwen3)) {
		t.Errorf("decode per token not ordered by size: %v %v %v", itl(small), itl(big), itl(qwen3))
	}
	if !(small.PrefillPerToken < big.PrefillPerToken && small.MaxNumSeqs > big.MaxNumSeqs) {
		t.Error("32B prefill should be slower and its batch smaller than 7B")
	}
	for name, m := range p {
		if err := m.validate(); err != nil {
			t.Errorf("preset %s invalid: %v", name, err)
		}
		if m.Name != name || m.Preset != name {
			t.Errorf("preset %s names itself %q/%q", name, m.Name, m.Preset)
		}
	}
}

func TestPresetFor_MatchesHuggingFaceIDsAndFallsBackToThe7B(t *testing.T) {
	m, ok := PresetFor("Qwen/Qwen3-32B")
	if !ok || m.Preset != "qwen3-32b" || m.Name != "Qwen/Qwen3-32B" || m.Root != "Qwen/Qwen3-32B" {
		t.Errorf("HF id: ok=%v %+v", ok, m)
	}
	m, ok = PresetFor("my-finetune")
	if ok || m.Preset != DefaultPreset || m.Name != "my-finetune" {
		t.Errorf("fallback: ok=%v %+v", ok, m)
	}
}

func TestNew_RejectsInvalidConfigurationsWithClearErrors(t *testing.T) {
	good := fastModel()
	cases := map[string]Config{
		"no models":        {},
		"max-num-seqs":     {Models: []ModelConfig{func() ModelConfig { m := good; m.MaxNumSeqs = 0; return m }()}},
		"configured twice": {Models: []ModelConfig{good, good}},
		"fail-429-rate":    {Models: []ModelConfig{good}, Faults: Faults{Fail429Rate: 2}},
		"queue-full":       {Models: []ModelConfig{good}, QueueFullStatus: 500},
		"spin":             {Models: []ModelConfig{func() ModelConfig { m := good; m.DecodeBase, m.DecodePerSeq = 0, 0; return m }()}},
	}
	for want, cfg := range cases {
		s, err := New(cfg)
		if err == nil {
			s.Close()
			t.Errorf("%s: accepted", want)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestModelsFor_GivesThePresetEnginesOfTheDemo(t *testing.T) {
	ms := ModelsFor("qwen2.5-7b-instruct", "qwen2.5-32b-instruct", "qwen3-32b")
	s, err := New(Config{Models: ms})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, m := range s.Models() {
		if m.Preset != ms[i].Name || m.DecodeBase == 0 {
			t.Errorf("model %d: %+v", i, m)
		}
	}
}

func TestNew_NameOnlyModelsTakeTheirPreset(t *testing.T) {
	s, err := New(Config{Models: []ModelConfig{
		{Name: "qwen3-32b"},
		{Name: "fast-one", Preset: "qwen2.5-7b-instruct"},
		{Name: "custom"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := Presets()
	got := s.Models()
	if got[0].DecodeBase != p["qwen3-32b"].DecodeBase || got[0].Root != "Qwen/Qwen3-32B" {
		t.Errorf("qwen3-32b: %+v", got[0])
	}
	if got[1].Name != "fast-one" || got[1].DecodeBase != p["qwen2.5-7b-instruct"].DecodeBase || got[1].Root != "Qwen/Qwen2.5-7B-Instruct" {
		t.Errorf("explicit preset: %+v", got[1])
	}
	if got[2].Preset != DefaultPreset || got[2].Root != "custom" {
		t.Errorf("default preset: %+v", got[2])
	}
	if _, err := New(Config{Models: []ModelConfig{{Name: "x", Preset: "nope"}}}); err == nil || !strings.Contains(err.Error(), "unknown preset") {
		t.Errorf("unknown preset: %v", err)
	}
}

func TestConfig_KVCacheDefaultsPerPresetAndFace(t *testing.T) {
	for _, c := range []struct {
		engine, model string
		seqs, want    int
	}{
		{EngineVLLM, "qwen2.5-7b-instruct", 0, 938192},
		{EngineVLLM, "qwen2.5-32b-instruct", 0, 49152},
		{EngineVLLM, "qwen3-32b", 0, 43520},
		{EngineVLLM, "my-model", 0, DefaultKVCacheTokens},
		{EngineLlamaCpp, "qwen3-tiny", 4, 4 * 2048},
		{EngineLlamaCpp, "qwen2.5-7b-instruct", 256, 262144},
	} {
		mc, _ := PresetFor(c.model)
		if c.engine == EngineLlamaCpp {
			mc.MaxModelLen, mc.MaxNumSeqs = 2048, c.seqs
		}
		cfg := Config{Models: []ModelConfig{mc}, Engine: c.engine}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		if got := cfg.Models[0].KVCacheTokens; got != c.want {
			t.Errorf("%s %s: KV cache %d tokens, want %d", c.engine, c.model, got, c.want)
		}
	}
}
