package discovery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	gbackoff "google.golang.org/grpc/backoff"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/backoff"
)

// EtcdConfig configures the etcd backend.
type EtcdConfig struct {
	Common
	// Endpoints are etcd's client URLs (--etcd-endpoints).
	Endpoints []string
	// Prefix scopes this deployment's keys (default "/tandem/"); records
	// live under Prefix + "workers/".
	Prefix string
	// DialTimeout bounds connecting (default 2 s).
	DialTimeout time.Duration
	// ProbeInterval is how often reachability is checked (default 1 s).
	// An outage raises discovery_unavailable within about two intervals;
	// the end of one makes every watcher re-list.
	ProbeInterval time.Duration
	// ResyncInterval re-lists even without a detected outage (default
	// 30 s), so a watch that silently stalled, or an etcd that came back
	// empty between two probes, cannot leave a frontend wrong for long.
	ResyncInterval time.Duration
	// Auth is etcd's TLS and user (--etcd-ca, --etcd-cert, --etcd-key,
	// --etcd-user-file).
	Auth EtcdAuth
}

// EtcdAuth is how a process authenticates to etcd: TLS with the CA that
// signs etcd's certificate and, for etcd's --client-cert-auth, a client
// certificate; and/or etcd's role-based user (a file holding
// "user:password"), see https://etcd.io/docs/v3.5/op-guide/security/ and
// https://etcd.io/docs/v3.5/op-guide/authentication/rbac/.
type EtcdAuth struct {
	CA, Cert, Key string
	UserFile      string
}

// apply fills c's TLS and credentials from a.
func (a EtcdAuth) apply(c *clientv3.Config) error {
	if a.CA != "" || a.Cert != "" || a.Key != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if a.CA != "" {
			b, err := os.ReadFile(a.CA)
			if err != nil {
				return fmt.Errorf("discovery: etcd CA: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(b) {
				return fmt.Errorf("discovery: etcd CA %s holds no PEM certificate", a.CA)
			}
		}
		if a.Cert != "" || a.Key != "" {
			cert, err := tls.LoadX509KeyPair(a.Cert, a.Key)
			if err != nil {
				return fmt.Errorf("discovery: etcd client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		c.TLS = tc
	}
	if a.UserFile != "" {
		fi, err := os.Stat(a.UserFile)
		if err != nil {
			return fmt.Errorf("discovery: etcd user: %w", err)
		}
		if fi.Size() > 4096 {
			return fmt.Errorf("discovery: etcd user file %s is %d bytes", a.UserFile, fi.Size())
		}
		b, err := os.ReadFile(a.UserFile)
		if err != nil {
			return fmt.Errorf("discovery: etcd user: %w", err)
		}
		user, pass, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
		if !ok || user == "" || pass == "" {
			return fmt.Errorf("discovery: etcd user file %s: want user:password", a.UserFile)
		}
		c.Username, c.Password = user, pass
	}
	return nil
}

// Etcd is the etcd backend. Each record is a key attached to a lease that
// its worker keeps alive; a worker that dies stops the keepalive and its key
// goes when the lease expires, within the TTL.
type Etcd struct {
	cfg    EtcdConfig
	cli    *clientv3.Client
	prefix string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	recovered chan struct{} // closed (and replaced) when etcd is reachable again
	down      bool
	leases    map[*etcdLease]struct{}
	closed    bool
}

// NewEtcd connects lazily: etcd need not be up yet. Until it is,
// discovery_unavailable is raised and registrations wait.
func NewEtcd(cfg EtcdConfig) (*Etcd, error) {
	cfg.Common = cfg.Common.withDefaults("discovery.etcd")
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("discovery: etcd backend needs endpoints (--etcd-endpoints)")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/tandem/"
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = time.Second
	}
	if cfg.ResyncInterval <= 0 {
		cfg.ResyncInterval = 30 * time.Second
	}
	ccfg := clientv3.Config{
		Endpoints: cfg.Endpoints, DialTimeout: cfg.DialTimeout,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
		// The client's own logger would print every retry; outages are
		// reported once, on the board.
		Logger: zap.NewNop(),
		// gRPC's default reconnect backoff grows to two minutes; a frontend
		// should notice a restarted etcd within a second or so.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           gbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: cfg.DialTimeout,
		})},
	}
	if err := cfg.Auth.apply(&ccfg); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("discovery: etcd client: %w", err)
	}
	e := &Etcd{cfg: cfg, cli: cli, prefix: cfg.Prefix + "workers/", recovered: make(chan struct{}), leases: map[*etcdLease]struct{}{}}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.wg.Add(1)
	go e.probe()
	return e, nil
}

const etcdSubject = "etcd"

// probe watches reachability: a linearizable read needs a leader and a
// quorum, which is exactly what registrations and watches need.
func (e *Etcd) probe() {
	defer e.wg.Done()
	tick := time.NewTicker(e.cfg.ProbeInterval)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(e.ctx, 2*e.cfg.ProbeInterval)
		_, err := e.cli.Get(ctx, e.prefix+"\x00probe", clientv3.WithCountOnly())
		cancel()
		if e.ctx.Err() != nil {
			return
		}
		e.setDown(err)
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (e *Etcd) setDown(err error) {
	e.mu.Lock()
	was := e.down
	e.down = err != nil
	if was && err == nil {
		close(e.recovered)
		e.recovered = make(chan struct{})
	}
	e.mu.Unlock()
	if err != nil {
		e.cfg.Board.Raise(DiagUnavailable, etcdSubject, health.Error,
			"etcd unreachable; keeping the last known workers, registrations retrying: "+err.Error(),
			"endpoints", strings.Join(e.cfg.Endpoints, ","))
	} else if was {
		e.cfg.Board.Clear(DiagUnavailable, etcdSubject, DiagRecovered, "etcd reachable again; resynchronizing")
	}
}

func (e *Etcd) recovery() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.recovered
}

func (e *Etcd) key(id string) string { return e.prefix + id }

// ttlSeconds rounds the TTL up to etcd's whole seconds.
func (e *Etcd) ttlSeconds() int64 {
	return int64(math.Ceil(e.cfg.TTL.Seconds()))
}

// Register implements Registry. It returns once the record is written (or
// ctx ends); from then on a keepalive loop holds the lease, and writes the
// record again under a new lease whenever the old one is lost (etcd
// restarted without its data, or an outage outlasted the TTL).
func (e *Etcd) Register(ctx context.Context, rec Record) (Lease, error) {
	val, err := rec.Marshal()
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.mu.Unlock()
	l := &etcdLease{e: e, id: rec.ID, val: string(val), done: make(chan struct{})}
	delay := retryBackoff()
	for {
		err := l.publish(ctx)
		if err == nil {
			break
		}
		e.cfg.Board.Raise(DiagUnavailable, etcdSubject, health.Error, "cannot register with etcd, retrying: "+err.Error())
		if !backoff.Sleep(ctx, delay.Next()) {
			return nil, fmt.Errorf("discovery: register %s in etcd: %w", rec.ID, errors.Join(ctx.Err(), err))
		}
	}
	lctx, cancel := context.WithCancel(e.ctx)
	l.cancel = cancel
	e.mu.Lock()
	e.leases[l] = struct{}{}
	e.mu.Unlock()
	go l.keepalive(lctx)
	return l, nil
}

type etcdLease struct {
	e      *Etcd
	id     string
	val    string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu    sync.Mutex
	lease clientv3.LeaseID
}

// publish grants a lease and writes the record under it.
func (l *etcdLease) publish(ctx context.Context) error {
	e := l.e
	ctx, cancel := context.WithTimeout(ctx, max(e.cfg.TTL, 2*time.Second))
	defer cancel()
	g, err := e.cli.Grant(ctx, e.ttlSeconds())
	if err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	if _, err := e.cli.Put(ctx, e.key(l.id), l.val, clientv3.WithLease(g.ID)); err != nil {
		// The lease would keep nothing; let it lapse.
		return fmt.Errorf("put: %w", err)
	}
	l.mu.Lock()
	l.lease = g.ID
	l.mu.Unlock()
	return nil
}

func (l *etcdLease) keepalive(ctx context.Context) {
	defer close(l.done)
	e := l.e
	for {
		l.mu.Lock()
		id := l.lease
		l.mu.Unlock()
		ch, err := e.cli.KeepAlive(ctx, id)
		if err == nil {
			for range ch {
			}
		}
		if ctx.Err() != nil {
			return
		}
		// The client closes the channel when the lease is gone or
		// unanswered for a whole TTL: the record may have expired, so it
		// is written again.
		e.cfg.Logger.Warn("etcd lease lost; registering again", "worker", l.id, "lease", int64(id))
		delay := retryBackoff()
		for {
			err := l.publish(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			e.cfg.Board.Raise(DiagUnavailable, etcdSubject, health.Error, "cannot register with etcd, retrying: "+err.Error())
			if !backoff.Sleep(ctx, delay.Next()) {
				return
			}
		}
	}
}

// Revoke implements Lease: the key goes with the lease at once.
func (l *etcdLease) Revoke(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.cancel()
		<-l.done
		l.e.mu.Lock()
		delete(l.e.leases, l)
		l.e.mu.Unlock()
		l.mu.Lock()
		id := l.lease
		l.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, rerr := l.e.cli.Revoke(rctx, id); rerr != nil {
			err = fmt.Errorf("discovery: revoke %s (its record expires within the TTL anyway): %w", l.id, rerr)
		}
	})
	return err
}

// Watch implements Registry: list, then watch from the listed revision;
// re-list after any watch error, after an outage ends, and every
// ResyncInterval.
func (e *Etcd) Watch(ctx context.Context, fn func(Event)) error {
	v := newView(fn)
	invalid := map[string]bool{}
	delay := retryBackoff()
	for ctx.Err() == nil {
		recovered := e.recovery()
		rev, err := e.list(ctx, v, invalid)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			e.cfg.Board.Raise(DiagUnavailable, etcdSubject, health.Error, "cannot list workers in etcd; keeping the last known ones: "+err.Error())
			if !backoff.Sleep(ctx, delay.Next()) {
				break
			}
			continue
		}
		delay.Reset()
		e.follow(ctx, v, invalid, rev, recovered)
	}
	return nil
}

func (e *Etcd) list(ctx context.Context, v *view, invalid map[string]bool) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := e.cli.Get(lctx, e.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	recs := map[string]Record{}
	for _, kv := range resp.Kvs {
		if r, ok := e.decode(string(kv.Key), kv.Value, invalid); ok {
			recs[r.ID] = r
		}
	}
	present := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = true
	}
	for key := range invalid {
		if !present[key] {
			delete(invalid, key)
			e.cfg.Board.Clear(DiagRecordInvalid, "etcd:"+key, "", "")
		}
	}
	v.replace(recs)
	return resp.Header.Revision, nil
}

func (e *Etcd) decode(key string, val []byte, invalid map[string]bool) (Record, bool) {
	r, err := UnmarshalRecord(val)
	if err == nil && e.key(r.ID) != key {
		err = fmt.Errorf("record id %q does not match its key", r.ID)
	}
	if err != nil {
		invalid[key] = true
		e.cfg.Board.Raise(DiagRecordInvalid, "etcd:"+key, health.Warn, "ignoring an invalid discovery record: "+err.Error())
		return Record{}, false
	}
	if invalid[key] {
		delete(invalid, key)
		e.cfg.Board.Clear(DiagRecordInvalid, "etcd:"+key, "", "")
	}
	return r, true
}

// follow applies watch events until the watch fails, etcd recovers from
// an outage, the resync interval passes or ctx ends.
func (e *Etcd) follow(ctx context.Context, v *view, invalid map[string]bool, rev int64, recovered <-chan struct{}) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := e.cli.Watch(wctx, e.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	resync := time.NewTimer(e.cfg.ResyncInterval)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-recovered:
			return
		case <-resync.C:
			return
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil || wr.Canceled {
				return
			}
			for _, ev := range wr.Events {
				key := string(ev.Kv.Key)
				switch ev.Type {
				case clientv3.EventTypePut:
					if r, ok := e.decode(key, ev.Kv.Value, invalid); ok {
						v.put(r)
					}
				case clientv3.EventTypeDelete:
					if invalid[key] {
						delete(invalid, key)
						e.cfg.Board.Clear(DiagRecordInvalid, "etcd:"+key, "", "")
					}
					v.remove(strings.TrimPrefix(key, e.prefix))
				}
			}
		}
	}
}

// Close implements Registry: leases are revoked, then the client closes.
func (e *Etcd) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	ls := make([]*etcdLease, 0, len(e.leases))
	for l := range e.leases {
		ls = append(ls, l)
	}
	e.mu.Unlock()
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.Revoke(context.Background()))
	}
	e.cancel()
	e.wg.Wait()
	errs = append(errs, e.cli.Close())
	return errors.Join(errs...)
}

// abandon stops every goroutine and the client without revoking anything,
// as a killed process would (tests).
func (e *Etcd) abandon() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.cancel()
	e.wg.Wait()
	_ = e.cli.Close()
}
