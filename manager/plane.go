package manager

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
)

// plane is the shell of a management plane (--mode=management). Every
// replica reads each member cluster into Member events (MemberSource), so
// that the state splits the fleet's budgets on what the members report.
// The leader alone writes: after the state moves, each member's copier
// computes that member's copies from the state (projector.Copies) and
// brings the member to them (apply.CopyWriter). Each member has a copier
// of its own, so that a member that hangs delays no other. The plane's
// own nodes get their statuses from the workload shell, which writes no
// Kueue object here (nothing is enrolled on a plane).
type plane struct {
	m       *Manager
	members []*planeMember
	// reportMu serializes the outcome reports of the members' copiers, so
	// that the last report sent reads every member's latest pass.
	reportMu sync.Mutex
}

// planeMember is one member cluster: how it is read, and how its copies
// are written.
type planeMember struct {
	name   string
	source *MemberSource
	writer *apply.CopyWriter
	// dirty asks its copier for a pass; a send never blocks.
	dirty chan struct{}
	// last is the summary of the last pass's report, logged when it
	// changes; touched by the member's copier alone.
	last string
	// mu guards report: its copier's latest report, nil before the first
	// pass that could list the member.
	mu     sync.Mutex
	report *apply.CopyReport
}

// memberTimeout bounds one read of a member and one copier pass on it.
const (
	memberReadTimeout = 10 * time.Second
	memberPassTimeout = 30 * time.Second
	// copyCoalesce is how long the copier waits after a pass before the
	// next: a burst of events makes one pass.
	copyCoalesce = 200 * time.Millisecond
	// copyRetry is how soon a pass that a member refused or did not
	// answer is tried again.
	copyRetry = 5 * time.Second
)

// newPlane builds the clients of every member from its kubeconfig. It
// fails on a kubeconfig that does not load, naming the member.
func newPlane(m *Manager) (*plane, error) {
	p := &plane{m: m}
	for _, name := range slices.Sorted(maps.Keys(m.opts.Members)) {
		path := m.opts.Members[name]
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("--member %s=%s: the kubeconfig does not load: %w", name, path, err)
		}
		cfg.QPS, cfg.Burst = m.opts.KubeAPIQPS, m.opts.KubeAPIBurst
		cfg.UserAgent = "ome-quota-manager-plane"
		quotas, err := versioned.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("--member %s: %w", name, err)
		}
		kq, err := kueueclient.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("--member %s: %w", name, err)
		}
		p.members = append(p.members, &planeMember{
			name:   name,
			source: &MemberSource{Name: name, Quotas: quotas, Kueue: kq, Origin: m.opts.Origin, Now: time.Now, Interval: m.opts.MemberPoll, Timeout: memberReadTimeout},
			writer: &apply.CopyWriter{Origin: m.opts.Origin, Quotas: quotas},
			dirty:  make(chan struct{}, 1),
		})
	}
	return p, nil
}

// poke asks every member's copier for a pass.
func (p *plane) poke() {
	for _, mb := range p.members {
		select {
		case mb.dirty <- struct{}{}:
		default:
		}
	}
}

// run starts every member's source, publishing into the stream, and its
// copier, until ctx ends.
func (p *plane) run(ctx context.Context) {
	for _, mb := range p.members {
		mb.source.Publish = func(ev events.Event) {
			if _, err := p.m.stream.Publish(ctx, ev); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "cannot publish what a member cluster reported", "member", ev.Key)
			}
		}
		go mb.source.Run(ctx)
		go p.copier(ctx, mb)
	}
}

// copier makes a pass on one member when asked, and every
// --resync-interval, while this replica leads.
func (p *plane) copier(ctx context.Context, mb *planeMember) {
	resync := time.NewTicker(p.m.opts.ResyncInterval)
	defer resync.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-mb.dirty:
		case <-resync.C:
		case <-retry:
		}
		retry = nil
		if !p.m.leader.Load() {
			continue
		}
		if !p.pass(ctx, mb) {
			retry = time.After(copyRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(copyCoalesce):
		}
	}
}

// pass brings one member, when its source finds it answering, to the
// copies the state asks for there, then reports the outcomes. It reports
// whether the member took them and the outcomes were sent.
func (p *plane) pass(ctx context.Context, mb *planeMember) bool {
	m := p.m
	m.mu.Lock()
	nodes := projector.FleetFromState(m.st)
	reachable := m.st.Reachable(mb.name)
	want := projector.Copies(nodes, mb.name, m.opts.Origin)
	seq := m.st.LastSeq()
	m.mu.Unlock()
	if !reachable {
		// Its copies stay as they are until it answers again (its next
		// Member event pokes).
		return true
	}
	if m.rec != nil {
		// The events the copies derive from are in the log before any
		// write they cause leaves the plane.
		m.rec.Wait(seq)
	}
	rep, ok := mb.apply(ctx, want)
	if rep != nil {
		mb.mu.Lock()
		mb.report = rep
		mb.mu.Unlock()
	}
	return p.report(ctx, nodes) && ok
}

// report sends, for each Ready node of the fleet, how the members hold
// its copies as their copiers' latest passes found them, as an Outcome event when it changed (the
// node's Materialized condition, and an ObjectConflict Event): a conflict
// on some member over a refused write over applied, the first member by
// name saying which. It queues each node whose outcome moved, so that its
// status is written. It reports whether every outcome was sent.
func (p *plane) report(ctx context.Context, nodes []projector.FleetNode) bool {
	p.reportMu.Lock()
	defer p.reportMu.Unlock()
	reports := make([]*apply.CopyReport, len(p.members))
	for i, mb := range p.members {
		mb.mu.Lock()
		reports[i] = mb.report
		mb.mu.Unlock()
	}
	rank := map[events.OutcomeKind]int{events.OutcomeApplied: 0, events.OutcomeFailed: 1, events.OutcomeConflict: 2}
	outcomes := map[string]events.Outcome{}
	for _, n := range nodes {
		if n.Ready && n.Depth >= 0 {
			outcomes[n.Name] = events.Outcome{Kind: events.OutcomeApplied}
		}
	}
	worse := func(name string, o events.Outcome) {
		if cur, ok := outcomes[name]; ok && rank[o.Kind] > rank[cur.Kind] {
			outcomes[name] = o
		}
	}
	for i, rep := range reports {
		if rep == nil {
			continue
		}
		member := p.members[i].name
		for _, name := range slices.Sorted(maps.Keys(rep.Failed)) {
			worse(name, events.Outcome{Kind: events.OutcomeFailed, Message: fmt.Sprintf("member %s refused the copy: %s", member, rep.Failed[name])})
		}
		for _, name := range slices.Sorted(maps.Keys(rep.Conflicts)) {
			worse(name, events.Outcome{Kind: events.OutcomeConflict, Message: fmt.Sprintf("member %s: %s", member, rep.Conflicts[name])})
		}
	}
	sent := true
	for _, name := range slices.Sorted(maps.Keys(outcomes)) {
		seq, err := p.m.reportOutcome(ctx, name, outcomes[name])
		if err != nil {
			if ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "cannot report how the members hold a node's copies; retrying", "node", name)
			}
			sent = false
			continue
		}
		if seq > 0 {
			p.m.shell.urgent.Add(name)
		}
	}
	return sent
}

// apply runs one CopyWriter pass on the member and logs what it did; the
// report is nil when the member could not be listed.
func (mb *planeMember) apply(ctx context.Context, want projector.MemberCopies) (*apply.CopyReport, bool) {
	log := klog.FromContext(ctx).WithValues("member", mb.name)
	ctx, cancel := context.WithTimeout(ctx, memberPassTimeout)
	defer cancel()
	rep, err := mb.writer.Apply(ctx, want)
	if err != nil {
		log.Error(err, "cannot bring the member's copies in place; retrying", "retryIn", copyRetry)
		return nil, false
	}
	if len(rep.Written) > 0 || len(rep.Swept) > 0 {
		log.Info("copies written to the member", "written", rep.Written, "swept", rep.Swept)
	}
	summary := fmt.Sprint(rep.Conflicts, rep.Failed)
	if summary != mb.last {
		mb.last = summary
		for name, why := range rep.Conflicts {
			log.Info("a fleet node is not copied to the member", "node", name, "why", why)
		}
		for name, why := range rep.Failed {
			log.Error(nil, "the member refused a copy", "node", name, "answer", why)
		}
	}
	return &rep, len(rep.Failed) == 0
}
