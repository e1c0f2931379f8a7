package relay

import (
	"net/http"

	"llmgate/internal/fleet"
	"llmgate/internal/router"
)

// routingHint is what the balancing of the route (or of its fallback
// models) reads of the request: the hashes of its prompt's prefix blocks
// (cache_aware) or its session key (session: the configured header, else
// the body's user field or Anthropic metadata.user_id). Nothing is
// computed for other balancings.
func (c *Call) routingHint(r *http.Request) router.Hint {
	var h router.Hint
	if c.route == nil || len(c.route.Deployments) < 2 && len(c.route.Fallbacks) == 0 {
		return h // nothing to choose between
	}
	prefix, session := c.route.HintWants()
	if prefix {
		h.Prefix = fleet.PrefixBlocks(c.Req.Body, nil)
	}
	if session {
		h.Session = r.Header.Get(c.Table.SessionHeader())
		if h.Session == "" {
			h.Session = fleet.SessionKey(c.Req.Body)
		}
	}
	return h
}
