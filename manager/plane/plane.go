package plane

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"

	"ome.io/quota-manager/api/client/clientset/versioned"
	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/state"
)

// plane is the shell of a management plane (--mode=management). Its
// inventory (inventory.go) says which clusters are members and how to
// reach each. Every replica watches each member, and each cluster that
// left the fleet while holding copies, into Member events
// (MemberSource), so that the state splits the fleet's budgets on what
// the members report. The leader alone writes: after the state moves,
// each member's copier computes that member's copies from the state
// (projector.Copies; none for a cluster that left) and brings the member
// to them (apply.CopyWriter). Each member has a copier of its own, so that
// a member that hangs delays no other. The plane's own nodes get their
// statuses from the workload shell, which writes no Kueue object here
// (nothing is enrolled on a plane).
type plane struct {
	h    manager.Host
	opts *manager.Options
	inv  inventory

	mu sync.Mutex
	// ctx is the plane's run; nil before run.
	ctx context.Context
	// running are the clusters watched and written, by name: the members
	// and the clusters leaving.
	running map[string]*planeMember
	// access is how to reach each cluster, as the inventory last said; a
	// cluster that left keeps its last access until it is forgotten.
	access map[string]memberAccess

	// reportMu serializes the outcome reports of the members' copiers, so
	// that the last report sent reads every member's latest pass.
	reportMu sync.Mutex
	// guardDirty asks the finalizer keeper for a pass (guard); guardErr
	// is the last error it logged per node (touched by the keeper alone).
	guardDirty chan struct{}
	guardErr   map[string]string
}

// planeMember is one cluster the plane watches and writes: how it is
// read, and how its copies are written, with the access they were built
// from.
type planeMember struct {
	name   string
	access memberAccess
	source *MemberSource
	writer *apply.CopyWriter
	stop   context.CancelFunc
	// dirty asks its copier for a pass; a send never blocks.
	dirty chan struct{}
	// last is the summary of the last pass's report, logged when it
	// changes; touched by the member's copier alone.
	last string
	// mu guards report: its copier's latest report, nil before the first
	// pass that could read the member.
	mu     sync.Mutex
	report *apply.CopyReport
	// leaving is whether that pass found the cluster out of the fleet:
	// its report says nothing of the fleet's nodes then.
	leaving bool
}

const (
	// memberPassTimeout bounds one copier pass on a member.
	memberPassTimeout = 30 * time.Second
	// copyCoalesce is how long the copier waits after a pass before the
	// next: a burst of events makes one pass.
	copyCoalesce = 200 * time.Millisecond
	// copyParallel bounds one member's copy writes in flight: a move of
	// many teams costs about one round trip, and a member's API server
	// sees no more at once than this.
	copyParallel = 8
	// copyRetry is how soon a pass that a member refused is tried again.
	copyRetry = 5 * time.Second
	// memberSettle is how long a burst of changes on a member settles
	// into one Member event; memberLostAfter how long its watches must
	// fail before it is reported as not answering.
	memberSettle    = 100 * time.Millisecond
	memberLostAfter = 3 * time.Second
)

// New builds a manager that runs a management plane
// (--mode=management); nothing runs until Run.
func New(o *manager.Options, cfg *rest.Config) (*manager.Manager, error) {
	m, _, err := newManager(o, cfg)
	return m, err
}

// newManager is New, with the plane the manager runs.
func newManager(o *manager.Options, cfg *rest.Config) (*manager.Manager, *plane, error) {
	var p *plane
	m, err := manager.NewMode(o, cfg, func(h manager.Host) (manager.Mode, error) {
		var err error
		p, err = newPlane(h, cfg)
		return p, err
	})
	return m, p, err
}

// newPlane builds the plane and its inventory; cfg reaches the plane's
// own cluster.
func newPlane(h manager.Host, cfg *rest.Config) (*plane, error) {
	o := h.Options()
	p := &plane{h: h, opts: o, running: map[string]*planeMember{}, access: map[string]memberAccess{}, guardDirty: make(chan struct{}, 1), guardErr: map[string]string{}}
	ns := o.ClusterProfileNamespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	switch o.MembersFrom {
	case manager.MembersFromClusterProfiles:
		if ns == "" {
			return nil, fmt.Errorf("--clusterprofile-namespace is empty and POD_NAMESPACE is not set: say which namespace holds the fleet's ClusterProfiles")
		}
		o.ClusterProfileNamespace = ns
		inv, err := newProfileInventory(p, cfg)
		if err != nil {
			return nil, err
		}
		p.inv = inv
	case manager.MembersFromSecrets:
		ns := os.Getenv("POD_NAMESPACE")
		if o.MembersNamespace != "" {
			ns = o.MembersNamespace
		}
		if ns == "" {
			return nil, fmt.Errorf("--members-namespace is empty and POD_NAMESPACE is not set: say which namespace holds the members' ConfigMap and Secrets")
		}
		p.inv = newSecretInventory(p, ns)
	default:
		return nil, fmt.Errorf("--members-from=%q: use %q or %q", o.MembersFrom, manager.MembersFromClusterProfiles, manager.MembersFromSecrets)
	}
	return p, nil
}

// clusterProfileAPI is what a plane whose members are ClusterProfiles
// watches.
var clusterProfileAPI = manager.API{
	GroupVersion: "multicluster.x-k8s.io/v1alpha1", Resources: []string{"clusterprofiles"},
	What: "the ClusterProfile CRD (SIG-Multicluster's cluster inventory)",
	Fix:  "install it with your fleet manager (Open Cluster Management, GKE Fleet, ...) or from sigs.k8s.io/cluster-inventory-api's config/crd, or run the plane with --members-from=secrets",
}

// APIs: a plane reads its own AcceleratorQuotas, and its inventory.
func (p *plane) APIs() []manager.API {
	if p.opts.MembersFrom == manager.MembersFromClusterProfiles {
		return []manager.API{clusterProfileAPI}
	}
	return nil
}

// Start starts the inventory and the finalizer keeper; the members'
// watches and copiers start as the state learns of them (sync). The
// plane measures nothing of its own cluster: its capacity is what its
// members report, and its inventory says who they are. It returns the
// inventory's handler registrations, which the Synced marker waits on.
func (p *plane) Start(ctx context.Context, _ *sources.Handlers) ([]cache.ResourceEventHandlerRegistration, error) {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
	go p.guarder(ctx)
	return p.inv.start(ctx)
}

// Applied brings the clusters watched to the state's fleet after each
// event that can change it, and asks every copier for a pass.
func (p *plane) Applied(_ context.Context, ev events.Event) {
	switch ev.Kind {
	case events.KindMembership:
		p.sync(p.fleetView(), ev.Key)
	case events.KindMember, events.KindConfig:
		p.sync(p.fleetView(), "")
	}
	p.poke()
}

// BecameLeader: the new leader's copiers make a pass at once.
func (p *plane) BecameLeader(context.Context) { p.poke() }

// NodeApplied: a plane node's outcome is how the members hold its copies
// (the copiers' report), not what the applier did on the plane's cluster,
// where it writes no Kueue object.
func (p *plane) NodeApplied(context.Context, string, events.Outcome) (uint64, error) { return 0, nil }

// setAccess takes the inventory's word on how to reach a cluster. A
// cluster watched through another access is watched anew through this
// one: its old watches and copier stop.
func (p *plane) setAccess(ctx context.Context, name string, a memberAccess) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.access[name]; ok && cur.key == a.key {
		return
	}
	p.access[name] = a
	if mb := p.running[name]; mb != nil {
		klog.FromContext(ctx).Info("the way to reach a member changed: watching it anew", "member", name)
		mb.stop()
		delete(p.running, name)
		p.startLocked(name)
	}
}

// fleetView is who the state counts in the fleet: its members, and the
// clusters that left it holding copies.
type fleetView struct{ members, leaving []string }

func (p *plane) fleetView() fleetView {
	var v fleetView
	p.h.View(func(st *state.State) {
		v.members, _, _ = st.Fleet()
		for _, mv := range st.Leaving() {
			v.leaving = append(v.leaving, mv.Name)
		}
	})
	return v
}

// sync brings the clusters watched to the members and leaving clusters
// of the state; moved, when not empty, joined or left the fleet, and
// reports afresh, so that the state learns what it holds now. The
// consumer calls it after each event that can change them.
func (p *plane) sync(v fleetView, moved string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil {
		return
	}
	want := map[string]bool{}
	for _, n := range v.members {
		want[n] = true
	}
	for _, n := range v.leaving {
		want[n] = true
	}
	for _, name := range slices.Sorted(maps.Keys(p.running)) {
		if !want[name] {
			p.running[name].stop()
			delete(p.running, name)
			delete(p.access, name)
			klog.FromContext(p.ctx).Info("stopped watching a cluster that left the fleet and holds no copy", "member", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if p.running[name] == nil {
			p.startLocked(name)
		}
	}
	if mb := p.running[moved]; mb != nil {
		mb.source.Republish()
		mb.poke()
	}
}

// startLocked starts watching and writing one cluster; p.mu is held.
func (p *plane) startLocked(name string) {
	ctx, cancel := context.WithCancel(p.ctx)
	a, known := p.access[name]
	mb := &planeMember{name: name, access: a, stop: cancel, dirty: make(chan struct{}, 1)}
	mb.source = &MemberSource{Name: name, Origin: p.opts.Origin, Now: time.Now, Settle: memberSettle, LostAfter: memberLostAfter,
		Publish: func(ev events.Event) {
			if _, err := p.h.Publish(ctx, ev); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "cannot publish what a member cluster reported", "member", ev.Key)
			}
		}}
	p.running[name] = mb
	var err error
	switch {
	case !known:
		err = fmt.Errorf("the plane's inventory gives no way to reach it yet")
	case a.err != nil:
		err = a.err
	default:
		err = mb.connect(p.opts, a.config)
	}
	if err != nil {
		// Nothing to watch: say why once; a new access starts it again.
		go mb.source.Publish(events.MemberLost(time.Now(), name, err.Error()))
		return
	}
	go mb.source.Run(ctx)
	go p.copier(ctx, mb)
}

// connect builds the clients of one member.
func (mb *planeMember) connect(o *manager.Options, base *rest.Config) error {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	cfg.UserAgent = "ome-quota-manager-plane"
	quotas, err := versioned.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building a client for it: %w", err)
	}
	kq, err := kueueclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("building a client for it: %w", err)
	}
	mb.source.Quotas, mb.source.Kueue = quotas, kq
	mb.writer = &apply.CopyWriter{Origin: o.Origin, Quotas: quotas, Parallel: copyParallel}
	return nil
}

func (mb *planeMember) poke() {
	select {
	case mb.dirty <- struct{}{}:
	default:
	}
}

// poke asks every copier, and the finalizer keeper, for a pass.
func (p *plane) poke() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, mb := range p.running {
		mb.poke()
	}
	select {
	case p.guardDirty <- struct{}{}:
	default:
	}
}

// guarder keeps the copies finalizer while this replica leads (guard):
// when poked, and every --resync-interval.
func (p *plane) guarder(ctx context.Context) {
	resync := time.NewTicker(p.opts.ResyncInterval)
	defer resync.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.guardDirty:
		case <-resync.C:
		case <-retry:
		}
		retry = nil
		if p.h.Leads() && !p.guard(ctx) {
			retry = time.After(copyRetry)
		}
	}
}

// guard puts the copies finalizer (v1beta1.CopiesFinalizer) on each team
// of the fleet tree that lacks it, and takes it off each team being
// deleted that no member holds a copy of any more (state.Releasable), so
// that a team's hold record outlives its copies. It reports whether every
// write went through.
func (p *plane) guard(ctx context.Context) bool {
	var add, release []string
	p.h.View(func(st *state.State) {
		for _, nv := range st.Nodes() {
			if nv.Spec.Role != v1beta1.RoleClusterQueue {
				continue
			}
			switch {
			case !nv.Deleting && !st.Guarded(nv.Name):
				add = append(add, nv.Name)
			case st.Releasable(nv.Name):
				release = append(release, nv.Name)
			}
		}
	})
	aqs := p.h.Quotas()
	ok := true
	set := func(name string, keep bool) {
		cur, err := aqs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if err == nil {
			has := slices.Contains(cur.Finalizers, v1beta1.CopiesFinalizer)
			switch {
			case keep && !has:
				cur.Finalizers = append(cur.Finalizers, v1beta1.CopiesFinalizer)
			case !keep && has:
				cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == v1beta1.CopiesFinalizer })
			default:
				return
			}
			_, err = aqs.Update(ctx, cur, metav1.UpdateOptions{FieldManager: apply.FieldManager})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			ok = false
			if !apierrors.IsConflict(err) && ctx.Err() == nil && p.guardErr[name] != err.Error() {
				// Said once per node and error: the keeper retries often.
				p.guardErr[name] = err.Error()
				klog.FromContext(ctx).Error(err, "cannot keep the plane's copies finalizer on a team; retrying", "node", name, "finalizer", v1beta1.CopiesFinalizer)
			}
			return
		}
		delete(p.guardErr, name)
		if !keep {
			klog.FromContext(ctx).Info("no member holds a copy of the deleted team any more: its finalizer is let go", "node", name)
		}
	}
	for _, name := range add {
		set(name, true)
	}
	for _, name := range release {
		set(name, false)
	}
	return ok
}

// copier makes a pass on one cluster when asked, and every
// --resync-interval, while this replica leads.
func (p *plane) copier(ctx context.Context, mb *planeMember) {
	resync := time.NewTicker(p.opts.ResyncInterval)
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
		if !p.h.Leads() {
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

// pass brings one cluster, when its watches answer, to the copies the
// state asks for there (none on a cluster that left the fleet), then
// reports the outcomes. It reports whether the cluster took them and the
// outcomes were sent.
func (p *plane) pass(ctx context.Context, mb *planeMember) bool {
	have, ok := mb.source.Objects()
	if !ok {
		// Its copies stay as they are until it answers again (its next
		// Member event pokes).
		return true
	}
	var nodes []projector.FleetNode
	var want projector.MemberCopies
	var member bool
	var seq uint64
	p.h.View(func(st *state.State) {
		nodes = projector.FleetFromState(st)
		members, _, _ := st.Fleet()
		member = slices.Contains(members, mb.name)
		if member {
			want = projector.Copies(nodes, mb.name, p.opts.Origin)
		}
		seq = st.LastSeq()
	})
	// The events the copies derive from are in the log before any write
	// they cause leaves the plane.
	p.h.WaitRecorded(seq)
	rep, ok := mb.apply(ctx, want, have, !member)
	mb.mu.Lock()
	mb.report, mb.leaving = rep, !member
	mb.mu.Unlock()
	return p.report(ctx, nodes) && ok
}

// report sends, for each Ready node of the fleet, how the members hold
// its copies as their copiers' latest passes found them, as an Outcome
// event when it changed (the node's Materialized condition, and an
// ObjectConflict Event): a conflict on some member over a refused write
// over applied, the first member by name saying which. It queues each
// node whose outcome moved, so that its status is written. It reports
// whether every outcome was sent.
func (p *plane) report(ctx context.Context, nodes []projector.FleetNode) bool {
	p.reportMu.Lock()
	defer p.reportMu.Unlock()
	p.mu.Lock()
	names := slices.Sorted(maps.Keys(p.running))
	reports := make([]*apply.CopyReport, len(names))
	for i, name := range names {
		mb := p.running[name]
		mb.mu.Lock()
		if !mb.leaving {
			reports[i] = mb.report
		}
		mb.mu.Unlock()
	}
	p.mu.Unlock()
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
		member := names[i]
		for _, name := range slices.Sorted(maps.Keys(rep.Failed)) {
			worse(name, events.Outcome{Kind: events.OutcomeFailed, Message: fmt.Sprintf("member %s refused the copy: %s", member, rep.Failed[name])})
		}
		for _, name := range slices.Sorted(maps.Keys(rep.Conflicts)) {
			worse(name, events.Outcome{Kind: events.OutcomeConflict, Message: fmt.Sprintf("member %s: %s", member, rep.Conflicts[name])})
		}
	}
	sent := true
	for _, name := range slices.Sorted(maps.Keys(outcomes)) {
		seq, err := p.h.ReportOutcome(ctx, name, outcomes[name])
		if err != nil {
			if ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "cannot report how the members hold a node's copies; retrying", "node", name)
			}
			sent = false
			continue
		}
		if seq > 0 {
			p.h.Queue(name)
		}
	}
	return sent
}

// apply runs one CopyWriter pass on the cluster and logs what it did.
func (mb *planeMember) apply(ctx context.Context, want projector.MemberCopies, have []*v1beta1.AcceleratorQuota, leaving bool) (*apply.CopyReport, bool) {
	log := klog.FromContext(ctx).WithValues("member", mb.name)
	ctx, cancel := context.WithTimeout(ctx, memberPassTimeout)
	defer cancel()
	rep := mb.writer.Apply(ctx, want, have)
	if len(rep.Written) > 0 || len(rep.Swept) > 0 {
		if leaving {
			log.Info("copies deleted from a cluster that left the fleet", "swept", rep.Swept)
		} else {
			log.Info("copies written to the member", "written", rep.Written, "swept", rep.Swept)
		}
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
