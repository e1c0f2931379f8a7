// Package admin is the gateway's management API, for the master key only:
// keys (create, list, show, update, revoke, rotate) and usage summaries.
// The CLI's --url mode talks to it through Client.
package admin

import (
	"errors"
	"fmt"
	"path"
	"time"

	"llmgate/internal/keys"
)

// Key is a key as the API shows it: never its secret or hash.
type Key struct {
	ID             string   `json:"id"`
	Name           string   `json:"name"`
	Owner          string   `json:"owner,omitempty"`
	Hint           string   `json:"hint"`
	Models         []string `json:"models"`
	RPM            int      `json:"rpm"`
	TPM            int      `json:"tpm"`
	MaxConcurrency int      `json:"max_concurrency"`
	// Priority is the key's weight in the deployments' fair queues (1
	// unless set).
	Priority     int               `json:"priority"`
	BudgetUSD    float64           `json:"budget_usd"`
	BudgetPeriod string            `json:"budget_period"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	// Objective is sent as x-gateway-inference-objective to backends with
	// inference_extension.
	Objective string     `json:"objective,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Status    string     `json:"status"`
	// SpentUSD is the spend in the current budget period (shown by "show",
	// omitted in lists): from a running gateway, the figure its budget is
	// enforced against - the larger of the ledger's spend and the limiter's
	// settled count, which is ahead by records not yet written; from the
	// database alone, the ledger's spend.
	SpentUSD *float64 `json:"spent_usd,omitempty"`
	// ReservedUSD is held by the key's requests in flight (their cost
	// estimates), which the budget also counts: a new request is admitted
	// while spent + reserved + its own estimate fit the budget. Shown by a
	// running gateway for keys with a budget.
	ReservedUSD *float64 `json:"reserved_usd,omitempty"`
}

// Issued is the answer to create and rotate: the key and its secret, shown
// this once.
type Issued struct {
	Key    Key    `json:"key"`
	Secret string `json:"secret"`
}

// KeySpec holds the fields of a create or update request; nil fields are
// left unchanged by an update (and take defaults on create).
type KeySpec struct {
	Name           *string            `json:"name,omitempty"`
	Owner          *string            `json:"owner,omitempty"`
	Models         *[]string          `json:"models,omitempty"`
	RPM            *int               `json:"rpm,omitempty"`
	TPM            *int               `json:"tpm,omitempty"`
	MaxConcurrency *int               `json:"max_concurrency,omitempty"`
	Priority       *int               `json:"priority,omitempty"`
	BudgetUSD      *float64           `json:"budget_usd,omitempty"`
	BudgetPeriod   *string            `json:"budget_period,omitempty"`
	Metadata       *map[string]string `json:"metadata,omitempty"`
	// Objective names an InferenceObjective; "" clears it.
	Objective *string `json:"objective,omitempty"`
	// ExpiresAt sets an expiry; an explicit zero time clears it.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Apply validates the spec and copies its fields onto k.
func (s *KeySpec) Apply(k *keys.Key) error {
	if s.Name != nil {
		k.Name = *s.Name
	}
	if s.Owner != nil {
		k.Owner = *s.Owner
	}
	if s.Models != nil {
		for _, p := range *s.Models {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("models: %q is not a valid glob pattern", p)
			}
		}
		k.Models = *s.Models
	}
	for _, f := range []struct {
		name string
		src  *int
		dst  *int
	}{{"rpm", s.RPM, &k.RPM}, {"tpm", s.TPM, &k.TPM}, {"max_concurrency", s.MaxConcurrency, &k.MaxConc}} {
		if f.src == nil {
			continue
		}
		if *f.src < 0 {
			return fmt.Errorf("%s must be 0 (unlimited) or more, not %d", f.name, *f.src)
		}
		*f.dst = *f.src
	}
	if s.Priority != nil {
		if *s.Priority < 1 || *s.Priority > keys.MaxPriority {
			return fmt.Errorf("priority must be 1 (the default) to %d: a key of priority 3 gets three turns to one of priority 1 in a busy deployment's queue, not %d", keys.MaxPriority, *s.Priority)
		}
		k.Priority = *s.Priority
	}
	if s.BudgetUSD != nil {
		if *s.BudgetUSD < 0 {
			return errors.New("budget_usd must be 0 (no budget) or more")
		}
		k.BudgetUSD = *s.BudgetUSD
	}
	if s.BudgetPeriod != nil {
		switch *s.BudgetPeriod {
		case "", "none":
			k.BudgetPeriod = ""
		case "daily", "monthly":
			k.BudgetPeriod = *s.BudgetPeriod
		default:
			return fmt.Errorf("budget_period must be none, daily or monthly, not %q", *s.BudgetPeriod)
		}
	}
	if s.Metadata != nil {
		k.Metadata = *s.Metadata
	}
	if s.Objective != nil {
		if err := keys.CheckObjective(*s.Objective); err != nil {
			return err
		}
		k.Objective = *s.Objective
	}
	if s.ExpiresAt != nil {
		if s.ExpiresAt.IsZero() {
			k.ExpiresAt = nil
		} else {
			t := *s.ExpiresAt
			k.ExpiresAt = &t
		}
	}
	return nil
}

// View converts a stored key for the API.
func View(k *keys.Key, now time.Time) Key {
	status := "active"
	if err := k.Usable(now); errors.Is(err, keys.ErrRevoked) {
		status = "revoked"
	} else if err != nil {
		status = "expired"
	}
	models := k.Models
	if models == nil {
		models = []string{}
	}
	period := k.BudgetPeriod
	if period == "" {
		period = "none"
	}
	return Key{ID: k.ID, Name: k.Name, Owner: k.Owner, Hint: k.Hint, Models: models, RPM: k.RPM, TPM: k.TPM, MaxConcurrency: k.MaxConc,
		Priority: k.EffectivePriority(), BudgetUSD: k.BudgetUSD, BudgetPeriod: period, Metadata: k.Metadata, Objective: k.Objective, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt,
		RevokedAt: k.RevokedAt, Status: status}
}
