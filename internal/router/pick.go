package router

// Pick returns the deployment of the route that ForwardHint, given the
// same hint afterwards, tries first: the balancing's first choice (its
// strategy on the hint, a deployment with fair-queue room ahead of a full
// one) among those that take requests now (backend up, breaker not open
// or resting). It takes neither a fair-queue slot nor a breaker's probe,
// so the caller can ask that deployment things before the attempt — a
// prompt count with its engine's tokenizer — and the attempt then goes
// where the count was made, unless it fails and a retry goes elsewhere.
//
// ok is false when no deployment of the route takes requests now, or when
// the first would be a half-open breaker's probe: the gateway asks nothing
// beside an attempt of a deployment it is avoiding. The pick is recorded
// in hint either way.
func (t *Table) Pick(r *Route, hint *Hint) (Deployment, bool) {
	hint.first = 0
	now := t.opt.Now()
	var buf [maxAttempts]int
	order := buf[:1] // a single deployment: index 0, no balancing to ask
	if len(r.Deployments) != 1 {
		order = t.order(r, buf[:0], hint)
		t.roomFirst(r, order)
	}
	for _, i := range order {
		d := r.Deployments[i]
		if d.s.be.down.Load() {
			continue
		}
		if ok, probe := d.s.br.peek(now); ok {
			hint.first = i + 1
			return d, !probe
		}
	}
	return Deployment{}, false
}

// putFirst moves the deployment index i to the front of order, keeping
// the others in their order.
func putFirst(order []int, i int) {
	for k, j := range order {
		if j == i {
			copy(order[1:k+1], order[:k])
			order[0] = i
			return
		}
	}
}
