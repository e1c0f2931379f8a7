package keys

import "context"

// verifiedKey is the context key of a principal that an in-process caller
// has already verified. It is unexported and only WithPrincipal sets it, so
// nothing sent over the network can produce it.
type verifiedKey struct{}

// WithPrincipal returns a context under which a gateway request is served
// as p without any credential header: the web console's playground uses it
// to call the API as the signed-in key without holding its secret. The
// caller must have verified p (a revoked or expired key must not get here);
// the model allow-list, limits, budgets and the usage ledger apply as usual.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, verifiedKey{}, p)
}

// PrincipalFrom returns the principal WithPrincipal attached, if any (a
// zero principal, neither master nor a key, does not count).
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(verifiedKey{}).(Principal)
	return p, ok && (p.Master || p.Key != nil)
}
