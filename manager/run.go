package manager

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	kueueclient "sigs.k8s.io/kueue/client-go/clientset/versioned"
	kueueinformers "sigs.k8s.io/kueue/client-go/informers/externalversions"

	"ome.io/quota-manager/api/client/clientset/versioned"
	aqtyped "ome.io/quota-manager/api/client/clientset/versioned/typed/api/v1beta1"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/events/sources"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/projector/apply"
	"ome.io/quota-manager/state"
	"ome.io/quota-manager/store"
)

// Manager is one running replica.
type Manager struct {
	opts    *Options
	cfg     *rest.Config
	metrics *metrics.Metrics

	kube  kubernetes.Interface
	kueue kueueclient.Interface
	aqs   aqtyped.AcceleratorQuotaInterface
	inf   *informerSet

	stream *events.Stream
	// log records every event (--event-log) through rec, which encodes and
	// writes on a goroutine of its own; both nil record nothing.
	log *store.Log
	rec *store.Recorder
	// verdicts records the webhook's verdicts in a log of their own
	// (store.VerdictsDir inside --event-log); nil when there is no log.
	verdicts *verdictLogs

	mu      sync.Mutex // guards st and applied
	st      *state.State
	applied chan struct{} // closed and replaced after each event

	shell  *shell
	leader atomic.Bool
	ready  atomic.Bool
	// stateSynced is set once the state has applied the Synced marker:
	// it holds every object listed at start.
	stateSynced atomic.Bool
	// startup says what the replica waits for while it starts.
	startup    atomic.Pointer[string]
	applier    *apply.Applier
	extraReady []func() error

	// announce emits Kubernetes Events on transitions (kubeevents.go);
	// guarded by mu.
	announce *announcer
	// undecodable reports the AcceleratorQuotas the cache skips (aqcache.go).
	undecodable *undecodable
	// schema reads the installed CRD's status schema (crdschema.go).
	schema *schemaWatch
	// mode is what the manager does beyond the shell every replica
	// shares (mode.go): workload's, or a management plane's.
	mode Mode
	// nonce tells this process's leads from another's of the same term
	// (events.Leadership.Nonce).
	nonce string
}

// newNonce is a process's nonce: 8 random bytes in hex.
func newNonce() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// RestConfig builds the client configuration from --kubeconfig, or from the
// pod's service account when it is empty.
func RestConfig(o *Options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("building the API client (--kubeconfig=%q): %w", o.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	cfg.UserAgent = "ome-quota-manager"
	if o.Record {
		cfg.UserAgent = "ome-quota-manager-record"
	}
	return cfg, nil
}

// New builds a workload-mode manager (workload.go); nothing runs until
// Run. A management plane is built with its own mode (NewMode).
func New(o *Options, cfg *rest.Config) (*Manager, error) {
	return newManager(o, cfg, func(m *Manager) (Mode, error) { return newWorkload(m), nil })
}

// NewMode builds a manager that runs the mode mode makes, from the
// manager's Host; nothing runs until Run.
func NewMode(o *Options, cfg *rest.Config, mode func(Host) (Mode, error)) (*Manager, error) {
	return newManager(o, cfg, func(m *Manager) (Mode, error) { return mode(host{m}) })
}

func newManager(o *Options, cfg *rest.Config, mode func(*Manager) (Mode, error)) (*Manager, error) {
	// One identity for the Lease, the admission ledger, the verdicts and
	// the event log's start markers, computed here once.
	id, err := o.LeaderIdentity()
	if err != nil {
		return nil, err
	}
	o.Identity = id
	m := &Manager{opts: o, cfg: cfg, metrics: metrics.New(), st: state.New(), applied: make(chan struct{}), nonce: newNonce()}
	if m.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	// The Kueue and the AcceleratorQuota clients each have one token
	// bucket, with a bulk and an urgent lane (lanes.go): urgent workers'
	// writes do not wait behind a bulk pass's.
	bulkCfg, urgentCfg := laneConfigs(cfg)
	if m.kueue, err = kueueclient.NewForConfig(bulkCfg); err != nil {
		return nil, err
	}
	kueueUrgent, err := kueueclient.NewForConfig(urgentCfg)
	if err != nil {
		return nil, err
	}
	bulkCfg, urgentCfg = laneConfigs(cfg)
	quotas, err := versioned.NewForConfig(bulkCfg)
	if err != nil {
		return nil, err
	}
	quotasUrgent, err := versioned.NewForConfig(urgentCfg)
	if err != nil {
		return nil, err
	}
	m.aqs = quotas.OmeV1beta1().AcceleratorQuotas()
	dyn, err := dynamic.NewForConfig(bulkCfg)
	if err != nil {
		return nil, err
	}
	m.undecodable = &undecodable{m: m, objs: map[string]*skipped{}}
	crds, err := apiextensionsclient.NewForConfig(bulkCfg)
	if err != nil {
		return nil, err
	}
	m.schema = &schemaWatch{m: m, crds: crds}
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.InOrderInformers) {
		// aqInformer's lists end with a marker that must come last.
		return nil, fmt.Errorf("client-go's InOrderInformers feature is off (KUBE_FEATURE_%s=false): the quota manager's AcceleratorQuota informer needs it to know when a list is all in; unset that variable", clientfeatures.InOrderInformers)
	}
	m.inf = &informerSet{
		kueue: kueueinformers.NewSharedInformerFactoryWithOptions(m.kueue, noResync, kueueinformers.WithTransform(slimKueue)),
		aq:    m.aqInformer(dyn),
	}
	m.inf.core = informers.NewSharedInformerFactoryWithOptions(m.kube, noResync, informers.WithTransform(m.inf.slimCore))
	kq := m.inf.kueue.Kueue().V1beta2()
	lqs := kq.LocalQueues().Informer()
	if err := lqs.AddIndexers(cache.Indexers{lqByName: indexByName}); err != nil {
		return nil, err
	}
	m.applier = &apply.Applier{
		Kueue: m.kueue, AQs: m.aqs, UrgentKueue: kueueUrgent, UrgentAQs: quotasUrgent.OmeV1beta1().AcceleratorQuotas(), Metrics: m.metrics, Workers: o.ApplyWorkers, Now: time.Now,
		Listers: apply.Listers{
			Cohorts: kq.Cohorts().Lister(), ClusterQueues: kq.ClusterQueues().Lister(), LocalQueues: kq.LocalQueues().Lister(),
			AQ: aqGetter(m.inf.aq), LocalQueuesNamed: localQueuesNamed(lqs),
		},
	}
	m.shell = newShell(m)
	if m.mode, err = mode(m); err != nil {
		return nil, err
	}
	next := uint64(1)
	if o.EventLog != "" {
		so, err := o.StoreOptions()
		if err != nil {
			return nil, fmt.Errorf("--event-log: %w", err)
		}
		so.OnSyncError = func(err error) {
			m.metrics.EventLogErrors.Inc()
			klog.Background().Error(err, "the event log could not be synced; what it held since the last sync may be lost, and the next event starts a new segment")
		}
		if m.log, err = store.Open(o.EventLog, so); err != nil {
			return nil, fmt.Errorf("--event-log=%s: %w", o.EventLog, err)
		}
		// The sequence continues the log's, with no gap across restarts.
		next = m.log.NextSeq()
		m.verdicts, err = openVerdicts(o, func(ev events.Event, err error) {
			m.metrics.EventLogErrors.Inc()
			klog.Background().Error(err, "cannot record the webhook's verdict; the log of verdicts will have a gap here", "seq", ev.Seq)
		})
		if err != nil {
			_ = m.log.Close()
			return nil, fmt.Errorf("--event-log=%s: %w", o.EventLog, err)
		}
		if o.EventLogPruneSiblings {
			m.pruneSiblings()
		}
	}
	m.stream = events.NewStream(4096, next)
	m.metrics.SetSource(m.metricsSnapshot)
	return m, nil
}

// Metrics returns the manager's collectors.
func (m *Manager) Metrics() *metrics.Metrics { return m.metrics }

// AddReadyCheck adds a condition to /readyz (the webhook adds its own).
func (m *Manager) AddReadyCheck(f func() error) { m.extraReady = append(m.extraReady, f) }

// Kube returns the Kubernetes client.
func (m *Manager) Kube() kubernetes.Interface { return m.kube }

// Run runs until ctx is done or a fatal error.
func (m *Manager) Run(ctx context.Context) error {
	log := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 8)
	if err := m.serve(ctx, errc); err != nil {
		return err
	}
	// The event log is closed last, once the consumer has stopped handing
	// it events, so that everything applied is recorded.
	consumed := make(chan struct{})
	consuming := false
	defer func() {
		cancel()
		if consuming {
			<-consumed
		}
		var err error
		if m.rec != nil {
			err = m.rec.Close()
		} else if m.log != nil {
			err = m.log.Close()
		}
		if err != nil {
			log.Error(err, "closing the event log")
		}
		if m.verdicts != nil {
			if err := m.verdicts.close(); err != nil {
				log.Error(err, "closing the log of the webhook's verdicts")
			}
		}
	}()

	handlers := sources.New(ctx, m.stream, time.Now, func(err error) {
		log.Error(err, "an input could not be turned into an event")
	})
	if m.log != nil && m.opts.EventLogPruneSiblings {
		go everyUntil(ctx, time.Hour, m.pruneSiblings)
	}
	if m.log != nil {
		m.rec = store.NewRecorder(m.log, 4096, func(ev events.Event, err error) {
			m.metrics.EventLogErrors.Inc()
			log.Error(err, "cannot record the event; the recorded log will have a gap here", "seq", ev.Seq)
		})
		for _, p := range m.log.Problems() {
			log.Info("the event log is damaged; replay reports it and goes on", "problem", p.String())
		}
		log.Info("recording events", "folder", m.log.Dir(), "nextSeq", m.log.NextSeq())
		if _, err := m.stream.Publish(ctx, events.Started(time.Now(), &events.Start{
			Version: Version(), Identity: m.opts.Identity, Args: os.Args[1:],
		})); err != nil {
			return err
		}
	}
	// The configuration is the first event, before any object.
	if err := sources.PublishConfig(ctx, m.stream, m.opts.EventsConfig(), time.Now()); err != nil {
		return err
	}
	// The registrations of the handlers that publish events: the Synced
	// marker waits until each has handled its informer's initial list.
	aqReg, err := m.inf.aq.AddEventHandler(handlers.Quotas())
	if err != nil {
		return err
	}
	consuming = true
	go func() {
		defer close(consumed)
		errc <- m.consume(ctx)
	}()
	// Informers on a resource the API server does not serve would retry
	// their lists with a growing backoff (46 s to recover once Kueue's
	// CRDs appeared): wait for the APIs first, naming what is missing.
	m.waitForAPIs(ctx)
	if ctx.Err() != nil {
		return nil
	}
	// What the mode reads, with the handlers that turn it into events.
	regs, err := m.mode.Start(ctx, handlers)
	if err != nil {
		return err
	}
	m.inf.start(ctx.Done())
	m.setStartup("loading the cluster: the informer caches have not synced yet")
	log.Info("waiting for informer caches")
	if err := m.inf.waitForSync(ctx.Done(), regs); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before the caches synced: a clean stop
		}
		return err
	}
	regs = append([]cache.ResourceEventHandlerRegistration{aqReg}, regs...)
	m.setStartup("loading the cluster: the informers' initial lists are not all in the state yet")
	if err := sources.PublishSynced(ctx, m.stream, time.Now, regs...); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}
	go func() {
		if err := sources.RunTicker(ctx, m.stream, m.opts.TickInterval(), time.Now); err != nil && !errors.Is(err, context.Canceled) {
			errc <- err
		}
	}()
	if m.opts.Record {
		// Informers and the log only: nothing is written, no Lease is held.
		m.ready.Store(true)
		log.Info("caches synced; recording", "eventLog", m.opts.EventLog)
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		}
	}
	m.startAnnouncer(ctx)
	// Before the first status write: which fields the installed CRD takes.
	m.schema.check(ctx)
	go everyUntil(ctx, time.Minute, func() { m.schema.check(ctx) })
	m.shell.run(ctx, m.opts.ApplyWorkers)
	m.ready.Store(true)
	log.Info("caches synced; running", "enrolledNamespaces", m.opts.EnrolledNamespaces, "tick", m.opts.TickInterval())

	id := m.opts.Identity
	leadDone := make(chan struct{})
	if m.opts.LeaderElect {
		go func() {
			defer close(leadDone)
			if err := m.lead(ctx, id); err != nil {
				errc <- err
			}
		}()
	} else {
		close(leadDone)
		m.becomeLeader(ctx, id)
	}
	select { // err is nil here: every failure above returned
	case <-ctx.Done():
	case err = <-errc:
		cancel()
	}
	// Give the Lease back before exiting, so that a follower takes over at
	// once instead of waiting for it to expire.
	select {
	case <-leadDone:
	case <-time.After(m.opts.LeaseRenewDeadline):
		log.Info("the Lease was not released in time; a follower takes over when it expires")
	}
	return err
}

// pruneSiblings removes the event logs of pods gone from the volume the
// log is on (--event-log-prune-siblings), and says which.
func (m *Manager) pruneSiblings() {
	removed, err := store.PruneSiblings(m.opts.EventLog, m.opts.EventLogMaxAge, time.Now())
	for _, d := range removed {
		klog.Background().Info("removed the event log of a replica gone for longer than --event-log-max-age", "folder", d)
	}
	if err != nil {
		klog.Background().Error(err, "cannot remove an old event log beside this one")
	}
}

// consume is the one goroutine that applies events to the state.
func (m *Manager) consume(ctx context.Context) error {
	log := klog.FromContext(ctx)
	err := m.stream.Consume(ctx, func(ev events.Event) error {
		// What the state sees is what the log holds: the event is queued
		// for the log before it is applied, and nothing derived from it is
		// written to the API server before the log has it (see
		// materialize). A failed append is logged and counted; the state
		// still applies the event, and a replay reports the gap.
		if m.rec != nil {
			m.rec.Record(ev)
		}
		m.mu.Lock()
		transitions := m.st.Apply(ev)
		changes := m.st.TakeChanges()
		m.announceApplied(transitions)
		close(m.applied)
		m.applied = make(chan struct{})
		m.mu.Unlock()
		if ev.Kind == events.KindSynced {
			m.stateSynced.Store(true)
		}
		m.shell.note(ev, changes)
		m.mode.Applied(ctx, ev)
		m.metrics.Events.WithLabelValues(string(ev.Kind)).Inc()
		m.metrics.EventLag.Observe(time.Since(ev.Time).Seconds())
		for _, t := range transitions {
			log.V(1).Info("transition", "transition", t)
		}
		return nil
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// ensureRoot creates root when it is missing at start, and puts its
// finalizer back when it was removed, retrying until it succeeds or ctx ends.
func (m *Manager) ensureRoot(ctx context.Context) {
	log := klog.FromContext(ctx)
	root := &v1beta1.AcceleratorQuota{
		ObjectMeta: metav1.ObjectMeta{Name: v1beta1.RootName, Finalizers: []string{v1beta1.RootFinalizer},
			Labels: map[string]string{v1beta1.ManagedByLabel: v1beta1.ManagedByValue}},
		Spec: v1beta1.AcceleratorQuotaSpec{Role: v1beta1.RoleCohort},
	}
	delay := 500 * time.Millisecond
	for {
		cur, err := m.aqs.Get(ctx, v1beta1.RootName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err = m.aqs.Create(ctx, root, metav1.CreateOptions{FieldManager: apply.FieldManager}); err == nil {
				log.Info("created root")
				return
			}
		case err == nil:
			if slices.Contains(cur.Finalizers, v1beta1.RootFinalizer) {
				return
			}
			cur.Finalizers = append(cur.Finalizers, v1beta1.RootFinalizer)
			if _, err = m.aqs.Update(ctx, cur, metav1.UpdateOptions{FieldManager: apply.FieldManager}); err == nil {
				log.Info("put root's finalizer back", "finalizer", v1beta1.RootFinalizer)
				return
			}
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			continue
		}
		log.Error(err, "cannot create root or restore its finalizer; retrying (check the manager's RBAC and the webhook)", "retryIn", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// lead campaigns for the Lease as id; while held, this replica applies.
func (m *Manager) lead(ctx context.Context, id string) error {
	ns := m.opts.LeaseNamespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		return errors.New("--leader-election-namespace is empty and POD_NAMESPACE is not set: say where the Lease lives, or run with --leader-elect=false")
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, m.opts.LeaseName, m.kube.CoreV1(), m.kube.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	lost := make(chan struct{})
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   m.opts.LeaseDuration,
		RenewDeadline:   m.opts.LeaseRenewDeadline,
		RetryPeriod:     m.opts.LeaseRetryPeriod,
		ReleaseOnCancel: true,
		Name:            m.opts.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { m.becomeLeader(ctx, id) },
			OnStoppedLeading: func() {
				m.leader.Store(false)
				m.metrics.Leader.Set(0)
				// Recorded when the lease is lost while running; on a
				// stop the consumer is gone and the log just ends (the
				// next start's marker clears the leadership).
				if _, err := m.stream.Publish(ctx, events.LeadershipChanged(time.Now(), id, events.LeadershipLost)); err != nil && ctx.Err() == nil {
					klog.FromContext(ctx).Error(err, "cannot record the loss of the lead in the event stream")
				}
				close(lost)
			},
		},
	})
	select {
	case <-lost:
	default:
	}
	if ctx.Err() != nil {
		return nil
	}
	// A replica that lost the lease while running stops, so that a restart
	// rejoins as a follower with nothing in flight.
	return errors.New("lost the leader lease")
}

// becomeLeader starts applying as id. The state learns that this replica
// leads (a Leadership event) before the replica's first pass, so that the
// log holds the change of leadership before any outcome its applier
// reports.
func (m *Manager) becomeLeader(ctx context.Context, id string) {
	log := klog.FromContext(ctx)
	ev := events.LeadershipChanged(time.Now(), id, events.LeadershipAcquired)
	term, err := m.leaseTerm(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			log.Error(err, "cannot read the Lease just taken; not applying")
		}
		return
	}
	ev.Leadership.Term, ev.Leadership.Nonce = term, m.nonce
	seq, err := m.stream.Publish(ctx, ev)
	if err == nil {
		err = m.waitApplied(ctx, seq)
	}
	if err != nil {
		if ctx.Err() == nil {
			log.Error(err, "cannot record the leadership in the event stream; not applying")
		}
		return
	}
	log.Info("became the leader: applying", "identity", id)
	m.leader.Store(true)
	m.metrics.Leader.Set(1)
	m.metrics.LeaderTransitions.Inc()
	m.undecodable.announce()
	// The leader alone creates root or restores its finalizer, in the
	// background: the write goes through the webhook, which may need this
	// replica.
	go m.ensureRoot(ctx)
	m.shell.resync(true, time.Time{})
	m.mode.BecameLeader(ctx)
}

// leaseTerm is this lead's term: the resourceVersion of the Lease as read
// once it is held, which grows with every write of the Lease and so with
// every change of holder (a management plane marks its hold records with
// it); 0 without leader election. It fails when the Lease cannot be read
// or another replica holds it by then.
func (m *Manager) leaseTerm(ctx context.Context, id string) (uint64, error) {
	if !m.opts.LeaderElect {
		return 0, nil
	}
	ns := m.opts.LeaseNamespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	lease, err := m.kube.CoordinationV1().Leases(ns).Get(ctx, m.opts.LeaseName, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != id {
		return 0, fmt.Errorf("the Lease %s/%s is no longer held by %s", ns, m.opts.LeaseName, id)
	}
	return strconv.ParseUint(lease.ResourceVersion, 10, 64)
}

// serve runs the metrics and health endpoints. /metrics is HTTPS with
// delegated authentication and authorization unless --metrics-secure=false.
func (m *Manager) serve(ctx context.Context, errc chan<- error) error {
	start := func(addr string, h http.Handler, tlsCfg *tls.Config) {
		if addr == "" || addr == "0" {
			return
		}
		srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsCfg}
		go func() {
			var err error
			if tlsCfg != nil {
				err = srv.ListenAndServeTLS("", "")
			} else {
				err = srv.ListenAndServe()
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serving on %s: %w", addr, err)
			}
		}()
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	inner := http.NewServeMux()
	inner.Handle("/metrics", promhttp.HandlerFor(m.metrics.Registry, promhttp.HandlerOpts{}))
	if m.opts.Profiling {
		// Go's profiles, behind the same authentication and authorization
		// as /metrics when it is secure (the non-resource URLs
		// /debug/pprof/*).
		inner.HandleFunc("/debug/pprof/", pprof.Index)
		inner.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		inner.HandleFunc("/debug/pprof/profile", pprof.Profile)
		inner.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		inner.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	var metricsHandler http.Handler = inner
	var tlsCfg *tls.Config
	if m.opts.MetricsSecure && m.opts.MetricsAddr != "" && m.opts.MetricsAddr != "0" {
		var err error
		if metricsHandler, err = secureMetrics(ctx, m.cfg, metricsHandler); err != nil {
			return err
		}
		if tlsCfg, err = metricsTLS(ctx, m.opts.MetricsCertDir, m.opts.MetricsAddr); err != nil {
			return err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler)
	if m.opts.Profiling {
		mux.Handle("/debug/pprof/", metricsHandler)
	}
	if m.opts.HealthAddr == m.opts.MetricsAddr {
		m.healthRoutes(mux)
		start(m.opts.MetricsAddr, mux, tlsCfg)
		return nil
	}
	start(m.opts.MetricsAddr, mux, tlsCfg)
	hmux := http.NewServeMux()
	m.healthRoutes(hmux)
	start(m.opts.HealthAddr, hmux, nil)
	return nil
}

func (m *Manager) healthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := m.NotReady(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		for _, f := range m.extraReady {
			if err := f(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
}
