package keys

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// Updater is implemented by stores that change keys after creation. Every
// change bumps KeysVersion, so verifiers on all replicas reload within
// their polling interval.
type Updater interface {
	// UpdateKey stores the mutable fields of k (name, owner, models,
	// limits, budget, metadata, expiry), found by k.ID.
	UpdateKey(ctx context.Context, k *Key) error
	// RotateKey replaces the secret hash and hint of an unrevoked key.
	RotateKey(ctx context.Context, id, hash, hint string) error
}

// Rotate gives a key a new secret and returns it; the old secret stops
// working on every replica within a second.
func Rotate(ctx context.Context, st Updater, id string) (string, error) {
	secret, err := Generate()
	if err != nil {
		return "", err
	}
	if err := st.RotateKey(ctx, id, Hash(secret), Hint(secret)); err != nil {
		return "", err
	}
	return secret, nil
}

// BudgetPeriods lists the accepted budget reset periods ("" = never).
var BudgetPeriods = []string{"", "none", "daily", "monthly"}

// PeriodStart returns the start of the budget period holding now (UTC);
// the zero time for keys whose budget never resets.
func PeriodStart(period string, now time.Time) time.Time {
	now = now.UTC()
	switch period {
	case "daily":
		return time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	case "monthly":
		return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// PeriodEnd returns when the budget period holding now ends; the zero time
// for budgets that never reset.
func PeriodEnd(period string, now time.Time) time.Time {
	s := PeriodStart(period, now)
	switch period {
	case "daily":
		return s.AddDate(0, 0, 1)
	case "monthly":
		return s.AddDate(0, 1, 0)
	}
	return time.Time{}
}

// Issue creates a key with a new secret and returns the stored record and
// the secret, which is not kept and cannot be shown again.
func Issue(ctx context.Context, st Store, k Key) (*Key, string, error) {
	secret, err := Generate()
	if err != nil {
		return nil, "", err
	}
	k.ID = NewID()
	k.Hash = Hash(secret)
	k.Hint = Hint(secret)
	if k.CreatedAt.IsZero() {
		k.CreatedAt = time.Now()
	}
	if err := st.CreateKey(ctx, &k); err != nil {
		return nil, "", err
	}
	return &k, secret, nil
}

// CheckObjective reports whether s can name an InferenceObjective (a
// Kubernetes object name: lower-case letters, digits, '-' and '.', at most
// 253 characters, starting and ending with a letter or digit); "" clears
// a key's objective.
func CheckObjective(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > 253 || !objectiveName.MatchString(s) {
		return fmt.Errorf("objective %q is not a Kubernetes object name: use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit (the name of an InferenceObjective, such as critical or batch)", s)
	}
	return nil
}

var objectiveName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
