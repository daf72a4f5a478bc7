package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/etcdtest"
	"github.com/tandemllm/tandem/internal/kubetest"
	"github.com/tandemllm/tandem/nodes/worker"
	"github.com/tandemllm/tandem/tokenizer"
)

// teeRegistry registers one worker in several backends at once, so the
// background fleet is the same 100 workers for every backend measured.
type teeRegistry []discovery.Registry

func (t teeRegistry) Register(ctx context.Context, rec discovery.Record) (discovery.Lease, error) {
	var ls teeLease
	for _, r := range t {
		l, err := r.Register(ctx, rec)
		if err != nil {
			_ = ls.Revoke(ctx)
			return nil, err
		}
		ls = append(ls, l)
	}
	return ls, nil
}

func (teeRegistry) Watch(context.Context, func(discovery.Event)) error {
	return errors.New("tee: register only")
}

func (t teeRegistry) Close() error {
	var errs []error
	for _, r := range t {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

type teeLease []discovery.Lease

func (t teeLease) Revoke(ctx context.Context) error {
	var errs []error
	for _, l := range t {
		errs = append(errs, l.Revoke(ctx))
	}
	return errors.Join(errs...)
}

// timedRegistry notes when its Register is called: the start of the
// measured interval.
type timedRegistry struct {
	discovery.Registry
	at chan time.Time
}

func (r *timedRegistry) Register(ctx context.Context, rec discovery.Record) (discovery.Lease, error) {
	r.at <- time.Now()
	return r.Registry.Register(ctx, rec)
}

// TestDiscoveryToFirstRoute measures, for each discovery backend, the time
// from a worker's registration (its Register call) to the first request
// the frontend routes to it, with 100 other workers registered and served
// by that frontend: file (10 ms polling), etcd (real etcd), and kube
// (kube-apiserver v1.37.2 through internal/kubetest, with 100 ready worker
// pods), in one run, rounds interleaved. The frontend routes least-loaded
// and the probe client sends one request at a time, so every probe goes to
// the lowest-id idle worker: the new worker's id sorts first, so the
// first probe after the frontend admits it is routed to it.
// TANDEM_KUBE_BENCH=1 runs it (docs/benchmarks/kubernetes.md); without
// TANDEM_KUBE_APISERVER the kube backend is left out.
func TestDiscoveryToFirstRoute(t *testing.T) {
	if os.Getenv("TANDEM_KUBE_BENCH") == "" {
		t.Skip("set TANDEM_KUBE_BENCH=1 to measure discovery → first routed request")
	}
	const ns, pools = "fleet", 100
	rounds := 50
	if n, err := strconv.Atoi(os.Getenv("TANDEM_BENCH_ROUNDS")); err == nil && n > 0 && n <= 10000 {
		rounds = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	board := health.NewBoard(quiet, nil)
	common := discovery.Common{TTL: 5 * time.Second, Board: board, Logger: quiet}
	sel := "app.kubernetes.io/component=tandem-worker"

	type backend struct {
		name string
		// watch is the frontend's registry; reg opens a worker's.
		watch discovery.Registry
		reg   func(id string) discovery.Registry
		// prepare readies what the worker needs before it registers (a
		// kube pod).
		prepare func(id string)
	}
	var backends []*backend
	dir := t.TempDir()
	openFile := func() discovery.Registry {
		f, err := discovery.NewFile(discovery.FileConfig{Dir: dir, PollInterval: 10 * time.Millisecond, Common: common})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	backends = append(backends, &backend{name: "file (10 ms poll)", watch: openFile(), reg: func(string) discovery.Registry { return openFile() }})
	etcd := etcdtest.Start(t)
	openEtcd := func() discovery.Registry {
		e, err := discovery.NewEtcd(discovery.EtcdConfig{Endpoints: []string{etcd.Endpoint()}, Common: common})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	backends = append(backends, &backend{name: "etcd", watch: openEtcd(), reg: func(string) discovery.Registry { return openEtcd() }})
	if _, err := kubetest.Binary(); err != nil {
		t.Logf("kube backend left out: %v", err)
	} else {
		s := kubetest.Start(t, nil, ns)
		clients, err := discovery.NewClientsForConfig(s.APIConfig())
		if err != nil {
			t.Fatal(err)
		}
		openKube := func(pod string) discovery.Registry {
			k, err := discovery.NewKube(discovery.KubeConfig{Common: common, Clients: clients, Namespace: ns, Selector: sel, PodName: pod})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k.Close() })
			return k
		}
		mkPod := func(name string) {
			s.ReadyPod(t, ns, name, map[string]string{"app.kubernetes.io/component": "tandem-worker"})
		}
		backends = append(backends, &backend{name: "kube (real kube-apiserver)", watch: openKube(""), reg: openKube, prepare: mkPod})
	}

	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	start := func(id string, reg discovery.Registry) (*worker.Worker, error) {
		mc := mocker.DefaultConfig()
		mc.Model, mc.EOS, mc.Instant = model.Name, model.Tokenizer.EOS(), true
		mc.KVEvents.Enabled = false
		mc.Logger = quiet
		e, err := mocker.New(mc)
		if err != nil {
			return nil, err
		}
		cfg := worker.DefaultConfig()
		cfg.ID, cfg.DeregisterDelay = id, 0
		return worker.Start(ctx, cfg, e, model, worker.Options{Registry: reg, Logger: quiet, Board: board})
	}
	startWorker := func(id string, reg discovery.Registry) *worker.Worker {
		w, err := start(id, reg)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	// The background: 100 workers, each registered in every backend.
	var bg []*worker.Worker
	for i := range pools {
		id := fmt.Sprintf("bg-%03d", i)
		var tee teeRegistry
		for _, b := range backends {
			if b.prepare != nil {
				b.prepare(id)
			}
			tee = append(tee, b.reg(id))
		}
		bg = append(bg, startWorker(id, tee))
	}
	defer func() {
		for _, w := range bg {
			_ = w.Shutdown(context.Background())
		}
	}()
	fes := map[*backend]*Process{}
	for _, b := range backends {
		cfg := DefaultConfig()
		cfg.HTTPAddr, cfg.RouterMode = "127.0.0.1:0", "least-loaded"
		fe, err := Start(ctx, cfg, model, Options{Registry: b.watch, Logger: quiet, Board: board})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = fe.Shutdown(context.Background()) }()
		fes[b] = fe
		deadline := time.Now().Add(2 * time.Minute)
		for len(fe.Members()) < pools {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d workers admitted", b.name, len(fe.Members()), pools)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	probe := func(fe *Process) (string, time.Time) {
		body := fmt.Sprintf(`{"model":%q,"prompt":"probe","max_tokens":1,"stream":false}`, model.Name)
		resp, err := hc.Post(fe.URL()+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("probe: status %d", resp.StatusCode)
		}
		return resp.Header.Get("X-Tandem-Worker"), at
	}
	// lat is registration → first routed request; adm registration →
	// the frontend's router listing the worker.
	lat, adm := map[*backend][]time.Duration{}, map[*backend][]time.Duration{}
	for r := range rounds {
		for _, b := range backends {
			id := fmt.Sprintf("a-%s-%02d", strings.Fields(b.name)[0], r)
			if b.prepare != nil {
				b.prepare(id)
			}
			fe := fes[b]
			tr := &timedRegistry{Registry: b.reg(id), at: make(chan time.Time, 1)}
			var w *worker.Worker
			var werr error
			var wg sync.WaitGroup
			wg.Go(func() { w, werr = start(id, tr) })
			var t0 time.Time
			select {
			case t0 = <-tr.at:
			case <-time.After(time.Minute):
				wg.Wait()
				t.Fatalf("%s: %s never registered: %v", b.name, id, werr)
			}
			admitted := make(chan time.Time, 1)
			go func() {
				for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if slices.Contains(fe.Members(), id) {
						admitted <- time.Now()
						return
					}
				}
				admitted <- time.Time{}
			}()
			for deadline := t0.Add(time.Minute); ; {
				got, at := probe(fe)
				if got == id {
					lat[b] = append(lat[b], at.Sub(t0))
					break
				}
				if at.After(deadline) {
					t.Fatalf("%s: %s never routed to", b.name, id)
				}
			}
			adm[b] = append(adm[b], (<-admitted).Sub(t0))
			wg.Wait()
			if werr != nil {
				t.Fatal(werr)
			}
			if err := w.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(time.Minute); slices.Contains(fe.Members(), id); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s never left", b.name, id)
				}
			}
		}
	}
	q := func(d []time.Duration, p float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(max(int(math.Ceil(p*float64(len(s))))-1, 0), len(s)-1)].Round(100 * time.Microsecond)
	}
	base := q(lat[backends[0]], 0.5)
	for _, b := range backends {
		t.Logf("%-28s %d rounds, %d workers: registration → first routed request p50 %v  p90 %v  p99 %v  max %v  (p50 vs file %.2fx); → admitted p50 %v  p99 %v",
			b.name, len(lat[b]), pools+1, q(lat[b], 0.5), q(lat[b], 0.9), q(lat[b], 0.99), q(lat[b], 1), float64(q(lat[b], 0.5))/float64(base), q(adm[b], 0.5), q(adm[b], 0.99))
	}
}
