package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tandemllm/tandem/control/discovery"
)

// frontend reads the frontend's /health and /metrics.
func (d *run) frontend() {
	b, code, err := d.get(d.fe, d.cfg.FrontendURL+"/health", maxHealthBytes, "")
	if err != nil {
		d.add(Check{ID: IDFrontendHealth, Verdict: Fail, Summary: "the frontend's /health cannot be read",
			Evidence: []string{err.Error()},
			Fix:      "check that the frontend runs and that --frontend is its --http-addr URL (https:// when it serves --tls-cert; --tls-ca for a private CA)"})
		return
	}
	var h frontendHealth
	if err := json.Unmarshal(b, &h); err != nil || h.Status == "" {
		d.add(Check{ID: IDFrontendHealth, Verdict: Fail, Summary: fmt.Sprintf("HTTP %d from /health is not a Tandem health report", code),
			Evidence: []string{fmt.Sprintf("%.200q", b)},
			Fix:      "point --frontend at a Tandem frontend (tandem frontend or tandem serve), not a worker or a proxy"})
	} else {
		d.health = &h
		c := Check{ID: IDFrontendHealth, Verdict: OK,
			Summary: fmt.Sprintf("status %s: %d models, %d routed workers, %d prefill workers, %d diagnostics", h.Status, len(h.Models), len(h.Workers), len(h.PrefillWorkers), len(h.Diagnostics))}
		switch h.Status {
		case "unavailable":
			var none []string
			for _, m := range h.Models {
				if m.Workers == 0 {
					none = append(none, m.Name)
				}
			}
			c.Verdict, c.Summary = Fail, "status unavailable: requests fail"
			c.Evidence = []string{fmt.Sprintf("models without a live worker: %s", strings.Join(none, ", "))}
			c.Fix = "start a worker for each of those models with the frontend's --discovery flags; `tandem doctor --expect-workers MODEL=N` names how many are missing"
		case "draining":
			c.Verdict, c.Summary = Fail, "status draining: the frontend got SIGTERM and takes no new requests"
			c.Fix = "wait for the frontend to exit and start it again (or route clients to another replica)"
		}
		d.add(c)
		for _, dg := range h.Diagnostics {
			d.add(diagnosticCheck(dg, ""))
		}
	}
	b, code, err = d.get(d.fe, d.cfg.FrontendURL+"/metrics", maxMetricsBytes, d.cfg.APIKey)
	switch {
	case err != nil:
		d.add(Check{ID: IDFrontendMetrics, Verdict: Fail, Summary: "the frontend's /metrics cannot be read", Evidence: []string{err.Error()},
			Fix: "check the frontend's address and that nothing between here and it cuts long bodies"})
		return
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		d.add(Check{ID: IDFrontendMetrics, Verdict: Fail, Summary: fmt.Sprintf("HTTP %d: /metrics needs an API key (--protect-metrics)", code),
			Fix: "pass one of the deployment's keys: --api-key KEY or $OPENAI_API_KEY"})
		return
	case code != http.StatusOK:
		d.add(Check{ID: IDFrontendMetrics, Verdict: Fail, Summary: fmt.Sprintf("HTTP %d from /metrics", code),
			Fix: "point --frontend at a Tandem frontend"})
		return
	}
	if d.metrics, err = parseMetrics(b); err != nil {
		d.add(Check{ID: IDFrontendMetrics, Verdict: Fail, Summary: "the frontend's /metrics is not valid Prometheus text", Evidence: []string{err.Error()},
			Fix: "report it: every /metrics Tandem serves must pass `promtool check metrics`"})
		return
	}
	d.add(Check{ID: IDFrontendMetrics, Verdict: OK, Summary: fmt.Sprintf("%d metric families", len(d.metrics))})
}

// diagnosticCheck turns an active diagnostic into a check; where names
// the process it came from when it is not the frontend.
func diagnosticCheck(dg diagnostic, where string) Check {
	v := Warn
	if dg.Severity == "error" {
		v = Fail
	}
	subject := dg.Subject
	if where != "" {
		subject = where + ":" + subject
	}
	return Check{ID: IDDiagnostic + "." + dg.Code, Subject: subject, Verdict: v, Summary: dg.Message,
		Evidence: []string{fmt.Sprintf("/health diagnostic %s (%s) on %s", dg.Code, dg.Severity, or(where, "the frontend"))},
		Fix:      diagnosticFix(dg.Code)}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// discovery reads every live record and checks that each one's request
// plane accepts connections: a record whose endpoint refuses is stale (a
// killed worker whose lease has not expired, a worker that moved).
func (d *run) discovery() {
	d.live = map[string]bool{}
	if d.cfg.Registry == nil {
		d.add(Check{ID: IDDiscoveryRead, Verdict: OK, Summary: "not read (no discovery backend given): worker records, metrics and links are not checked"})
		return
	}
	recs, err := readRecords(d.ctx, d.cfg.Registry, d.cfg.Timeout)
	if err != nil {
		d.add(Check{ID: IDDiscoveryRead, Verdict: Fail, Summary: "the discovery records cannot be read", Evidence: []string{err.Error()},
			Fix: "pass the deployment's own discovery flags (--discovery, --discovery-dir, --etcd-endpoints, --discovery-prefix, --kube-*) and check that the backend is up"})
		return
	}
	d.records, d.readRec = recs, true
	d.add(Check{ID: IDDiscoveryRead, Verdict: OK, Summary: fmt.Sprintf("%d live records", len(recs))})
	var wg sync.WaitGroup
	errs := make([]error, len(recs))
	for i, r := range recs {
		wg.Go(func() { errs[i] = d.dialable(r.RequestPlane) })
	}
	wg.Wait()
	for i, r := range recs {
		if errs[i] == nil {
			d.live[r.ID] = true
			continue
		}
		fix := d.cfg.DiscoveryFix
		if fix == "" {
			fix = "remove the record by hand or wait for its lease to expire (--lease-ttl)"
		}
		d.add(Check{ID: IDDiscoveryStale, Subject: r.ID, Verdict: Fail,
			Summary:  fmt.Sprintf("stale record: %s (%s, %s) is registered but its request plane %s refuses connections", r.ID, r.Model, r.Role, r.RequestPlane),
			Evidence: []string{"dial " + r.RequestPlane + ": " + errs[i].Error()},
			Fix: "if the worker is gone, " + strings.ReplaceAll(fix, "{id}", r.ID) +
				"; if it still runs, it registered an address others cannot reach: set --advertise-host and --rp-addr to a reachable host:port"})
	}
}

// readRecords returns the live records: one Watch up to its Synced event.
func readRecords(ctx context.Context, reg discovery.Registry, timeout time.Duration) ([]discovery.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var mu sync.Mutex
	recs := map[string]discovery.Record{}
	synced := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- reg.Watch(ctx, func(e discovery.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Type {
			case discovery.EventPut:
				recs[e.Record.ID] = e.Record
			case discovery.EventDelete:
				delete(recs, e.Record.ID)
			case discovery.EventSynced:
				once.Do(func() { close(synced) })
			}
		})
	}()
	var err error
	select {
	case <-synced:
	case err = <-done:
		if err == nil {
			err = errors.New("the watch ended before listing the records")
		}
		return nil, err
	case <-ctx.Done():
		err = fmt.Errorf("no complete listing within %v: %w", timeout, ctx.Err())
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		// A backend slow to stop its watch costs this run nothing more.
	}
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	out := make([]discovery.Record, 0, len(recs))
	for _, r := range recs {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// workers checks the expected counts, that the frontend paired every
// record, and reads each worker's /metrics and /health.
func (d *run) workers() {
	routed := map[string]bool{}
	if d.health != nil {
		for _, w := range d.health.Workers {
			routed[w.ID] = true
		}
		for _, w := range d.health.PrefillWorkers {
			routed[w.ID] = true
		}
	}
	for _, e := range d.cfg.Expect {
		var live, stale []string
		matches := func(model string, role discovery.Role) bool {
			return (e.Model == "" || e.Model == model) && (e.Role == "" || e.Role == role)
		}
		if d.readRec {
			for _, r := range d.records {
				if !matches(r.Model, r.Role) {
					continue
				}
				if d.live[r.ID] {
					live = append(live, r.ID)
				} else {
					stale = append(stale, r.ID)
				}
			}
		} else if d.health != nil {
			// Without records, what the frontend routes is the count.
			for _, w := range d.health.Workers {
				if matches(w.Model, "") && (e.Role == "" || e.Role != discovery.RolePrefill) {
					live = append(live, w.ID)
				}
			}
			for _, w := range d.health.PrefillWorkers {
				if matches(w.Model, discovery.RolePrefill) {
					live = append(live, w.ID)
				}
			}
		}
		c := Check{ID: IDWorkersExpected, Subject: e.String(), Verdict: OK,
			Summary:  fmt.Sprintf("%d live of %d expected", len(live), e.N),
			Evidence: []string{"live: " + or(strings.Join(live, ", "), "none")}}
		if len(stale) > 0 {
			c.Evidence = append(c.Evidence, "registered but unreachable: "+strings.Join(stale, ", "))
		}
		if len(live) < e.N {
			c.Verdict = Fail
			c.Summary = fmt.Sprintf("%d live of %d expected: %d worker(s) never started or died", len(live), e.N, e.N-len(live))
			c.Fix = fmt.Sprintf("start the missing %s worker(s) (`tandem worker` with the deployment's --discovery flags%s) and read their logs: a worker that exits during start-up (engine error, port in use, bad flags) never registers; on Kubernetes `kubectl get pods` and `kubectl logs` the pool's pods",
				e.String(), roleFlag(e.Role))
		}
		d.add(c)
	}
	if !d.readRec {
		return
	}
	for _, r := range d.records {
		if !d.live[r.ID] || d.health == nil || routed[r.ID] {
			continue
		}
		var why []string
		for _, dg := range d.health.Diagnostics {
			if dg.Subject == r.ID {
				why = append(why, dg.Code+": "+dg.Message)
			}
		}
		d.add(Check{ID: IDWorkersPaired, Subject: r.ID, Verdict: Fail,
			Summary:  fmt.Sprintf("%s (%s, %s) is registered and reachable but the frontend does not use it", r.ID, r.Model, r.Role),
			Evidence: append(why, "record engine "+r.Engine+", version "+r.Version),
			Fix:      "read the frontend's diagnostic about it (worker_refused, worker_model_unserved, tokenizer_mismatch, kv_layout_mismatch): start the worker with the frontend's model and tokenizer, or start a frontend for its model"})
	}
	d.wmetrics = map[string]families{}
	scheme := "http://"
	if d.cfg.WorkerTLS != nil {
		scheme = "https://"
	}
	type got struct {
		fams  families
		err   error
		diags []diagnostic
	}
	res := make([]got, len(d.records))
	var wg sync.WaitGroup
	for i, r := range d.records {
		if r.MetricsAddr == "" || !d.live[r.ID] {
			continue
		}
		wg.Go(func() {
			b, code, err := d.get(d.wk, scheme+r.MetricsAddr+"/metrics", maxMetricsBytes, "")
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("HTTP %d", code)
			}
			if err == nil {
				res[i].fams, err = parseMetrics(b)
			}
			res[i].err = err
			if b, _, err := d.get(d.wk, scheme+r.MetricsAddr+"/health", maxHealthBytes, ""); err == nil {
				var h struct {
					Diagnostics []diagnostic `json:"diagnostics"`
				}
				if json.Unmarshal(b, &h) == nil {
					res[i].diags = h.Diagnostics
				}
			}
		})
	}
	wg.Wait()
	for i, r := range d.records {
		if r.MetricsAddr == "" || !d.live[r.ID] {
			continue
		}
		if err := res[i].err; err != nil {
			d.add(Check{ID: IDWorkerMetrics, Subject: r.ID, Verdict: Warn,
				Summary: "the worker's /metrics at " + r.MetricsAddr + " cannot be read", Evidence: []string{err.Error()},
				Fix: "with the cluster identity (--mtls-*) workers' metrics ports serve HTTPS to monitor and frontend certificates only: pass one (`tandem certs issue --role monitor`) with --mtls-ca/--mtls-cert/--mtls-key"})
			continue
		}
		d.wmetrics[r.ID] = res[i].fams
		for _, dg := range res[i].diags {
			d.add(diagnosticCheck(dg, r.ID))
		}
	}
}

func roleFlag(r discovery.Role) string {
	if r == "" || r == discovery.RoleAggregated {
		return ""
	}
	return " and --role " + string(r)
}

// kvEvents checks that the router hears each routed worker's KV events:
// the seeds' first checklist item, since without them KV routing falls to
// random-level hit rates and says nothing.
func (d *run) kvEvents() {
	if d.health == nil {
		return
	}
	recs := map[string]discovery.Record{}
	for _, r := range d.records {
		recs[r.ID] = r
	}
	for _, w := range d.health.Workers {
		if w.KVEvents == "" {
			continue // not a kv router: nothing listens for events
		}
		age := "no event ever arrived"
		if w.KVLastEventAgeSeconds != nil {
			age = fmt.Sprintf("last event %.1fs ago", *w.KVLastEventAgeSeconds)
		}
		ev := []string{fmt.Sprintf("router state %s, %d events applied, %s", w.KVEvents, w.KVEventsApplied, age)}
		c := Check{ID: IDKVEvents, Subject: w.ID, Verdict: OK, Summary: fmt.Sprintf("%s: %d events applied", w.KVEvents, w.KVEventsApplied), Evidence: ev}
		r, known := recs[w.ID]
		if known {
			c.Evidence = append(c.Evidence, fmt.Sprintf("record: endpoint %q, nats subject %q", r.KVEvents.Endpoint, r.KVEvents.Subject))
		}
		switch {
		case known && r.KVEvents.Endpoint == "" && r.KVEvents.Subject == "":
			c.Verdict = Fail
			c.Summary = "the worker publishes no KV events: the router routes it by its own guesses, and cache hits fall to random"
			c.Fix = fmt.Sprintf("restart %s with KV events on (`tandem worker --kv-events on`, the default, with a --kv-events-endpoint the frontend can reach); a vLLM server needs --kv-events-config '{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://*:5557\"}' and that endpoint in --upstream-kv-events", w.ID)
		case w.KVEvents == "missing":
			c.Verdict = Fail
			c.Summary = "the worker computed full blocks but no BlockStored reached the router (kv_events_missing)"
			c.Fix = "check that the frontend can connect to the record's endpoint (firewall, --advertise-host), that both sides use one --event-plane (zmq or nats, one --nats-subject-prefix) and one topic"
		case w.KVEvents == "refused":
			c.Verdict = Fail
			c.Summary = "the router refused the worker's events: its block size does not fit the router's (kv_block_size_mismatch)"
			c.Fix = "use one block size: the worker's --block-size must be a multiple of the frontend's --router-block-size"
		case w.KVEvents == "rebuilding" && !d.hasDiag("kv_events_lost", w.ID):
			// No loss: the stream began past batch 0 (a subscription that
			// joined a running engine, or a publisher that numbers from 1,
			// as llm-d's simulators do), so the router adds its own routing
			// records to the index for its rebuild window. Healthy.
			c.Summary = fmt.Sprintf("%d events applied; the stream began mid-way and the index is completed from the router's own records for the rebuild window", w.KVEventsApplied)
		case w.KVEvents == "rebuilding":
			c.Verdict = Warn
			c.Summary = "events were lost and the worker's index is being rebuilt (kv_events_lost)"
			c.Fix = "give the worker a replay socket (--kv-events-replay-endpoint auto) so gaps are replayed instead of lost"
			if (known && r.Engine == "upstream") || d.hasDiagPrefix("upstream_", w.ID) {
				c.Fix = "give Tandem the server's replay socket (--upstream-kv-events-replay tcp://host:port, the replay_endpoint of vLLM's --kv-events-config) so gaps are replayed instead of lost"
			}
		case w.KVEvents == "connecting":
			c.Verdict = Warn
			c.Summary = "the router has no live event stream from the worker yet"
			c.Fix = "if it stays so, check that the frontend can connect to the worker's KV event endpoint (firewall, --advertise-host)"
		}
		d.add(c)
	}
}

// hasDiag reports whether the frontend's /health has the diagnostic code
// active for subject.
func (d *run) hasDiag(code, subject string) bool {
	for _, dg := range d.health.Diagnostics {
		if dg.Code == code && dg.Subject == subject {
			return true
		}
	}
	return false
}

// hasDiagPrefix is hasDiag for any code starting with prefix.
func (d *run) hasDiagPrefix(prefix, subject string) bool {
	for _, dg := range d.health.Diagnostics {
		if strings.HasPrefix(dg.Code, prefix) && dg.Subject == subject {
			return true
		}
	}
	return false
}

// blockSizes checks that every worker of one model uses one block size:
// KV routing hashes blocks of one size, and prefill and decode workers of
// different sizes never pair.
func (d *run) blockSizes() {
	byModel := map[string]map[int][]string{}
	for _, r := range d.records {
		if byModel[r.Model] == nil {
			byModel[r.Model] = map[int][]string{}
		}
		byModel[r.Model][r.KVLayout.BlockSize] = append(byModel[r.Model][r.KVLayout.BlockSize], r.ID)
	}
	models := make([]string, 0, len(byModel))
	for m := range byModel {
		models = append(models, m)
	}
	slices.Sort(models)
	for _, m := range models {
		sizes := byModel[m]
		keys := make([]int, 0, len(sizes))
		for s := range sizes {
			keys = append(keys, s)
		}
		// The most common size first: the others are the odd ones out.
		sort.Slice(keys, func(i, j int) bool {
			if len(sizes[keys[i]]) != len(sizes[keys[j]]) {
				return len(sizes[keys[i]]) > len(sizes[keys[j]])
			}
			return keys[i] < keys[j]
		})
		var ev []string
		for _, s := range keys {
			ev = append(ev, fmt.Sprintf("block size %d: %s", s, strings.Join(sizes[s], ", ")))
		}
		c := Check{ID: IDBlockSize, Subject: m, Verdict: OK, Summary: fmt.Sprintf("every worker uses block size %d", keys[0]), Evidence: ev}
		if len(keys) > 1 {
			var odd []string
			for _, s := range keys[1:] {
				odd = append(odd, sizes[s]...)
			}
			c.Verdict = Fail
			c.Summary = fmt.Sprintf("workers of %s use %d block sizes", m, len(keys))
			c.Fix = fmt.Sprintf("restart %s with --block-size %d (the size most of the model's workers use), or every worker with one size; the router's --router-block-size must divide it", strings.Join(odd, ", "), keys[0])
		}
		d.add(c)
	}
}

// disagg checks every prefill/decode pair of a model: their KV layouts
// agree, and the link between them moves the reference prompt's KV within
// the budget (the seeds' slow link: KV bytes ÷ link throughput added to
// every TTFT).
func (d *run) disagg() {
	var prefill, decode []discovery.Record
	for _, r := range d.records {
		if !d.live[r.ID] {
			continue
		}
		switch r.Role {
		case discovery.RolePrefill:
			prefill = append(prefill, r)
		case discovery.RoleDecode:
			decode = append(decode, r)
		}
	}
	reasons := d.metrics.byLabel("tandem_disagg_decisions_total", "reason")
	for _, p := range prefill {
		for _, dc := range decode {
			if p.Model != dc.Model {
				continue
			}
			pair := p.ID + "->" + dc.ID
			if diff := p.KVLayout.Diff(dc.KVLayout); len(diff) > 0 {
				d.add(Check{ID: IDDisaggLayout, Subject: pair, Verdict: Fail,
					Summary:  "prefill and decode KV layouts differ: the pair is never used",
					Evidence: diff,
					Fix:      "start prefill and decode workers of a model from one configuration (model, dtype, --block-size, tokenizer, --kv-config-fingerprint): restart the odd one with the others' values"})
				continue
			}
			d.add(Check{ID: IDDisaggLayout, Subject: pair, Verdict: OK, Summary: "layouts agree (" + p.KVLayout.Fingerprint() + ")"})
			if dc.KVTransfer.Protocol == discovery.ProtocolVLLM || p.KVTransfer.Protocol == discovery.ProtocolVLLM {
				continue // vLLM moves its KV itself; Tandem measures no link
			}
			d.link(p, dc, pair, reasons)
		}
	}
}

func (d *run) link(p, dc discovery.Record, pair string, reasons map[string]float64) {
	c := Check{ID: IDDisaggLink, Subject: pair}
	pm, ok := d.wmetrics[p.ID]
	if !ok {
		c.Verdict, c.Summary = Warn, "the link is not measured: the prefill worker's /metrics is not read"
		c.Fix = fmt.Sprintf("start %s with --metrics-addr so its link throughput (tandem_kv_link_throughput_bytes_per_second) can be read", p.ID)
		d.add(c)
		return
	}
	labels := map[string]string{"src": p.ID, "dst": dc.ID}
	bps, ok := pm.gauge("tandem_kv_link_throughput_bytes_per_second", labels)
	if !ok || bps <= 0 {
		c.Verdict, c.Summary = Warn, "the link has not been measured yet"
		c.Fix = fmt.Sprintf("the frontend probes each new pair; if it stays unmeasured, check that %s can connect to %s's KV transfer address %s (kv_transfer_failed, kv_transfer_peer_refused diagnostics)", p.ID, dc.ID, dc.KVTransfer.Addr)
		d.add(c)
		return
	}
	bs, bb := dc.KVLayout.BlockSize, dc.KVTransfer.BlockBytes
	if bb == 0 {
		bb = p.KVTransfer.BlockBytes
	}
	if bs <= 0 || bb <= 0 {
		c.Verdict, c.Summary = Warn, fmt.Sprintf("link %.1f MB/s, but the records give no block bytes to price a prompt with", bps/1e6)
		c.Fix = "upgrade the workers: records carry kv_transfer.block_bytes"
		d.add(c)
		return
	}
	perToken := float64(bb) / float64(bs)
	bytes := perToken * float64(d.cfg.ReferencePromptTokens)
	est := time.Duration(bytes / bps * float64(time.Second))
	c.Evidence = []string{
		fmt.Sprintf("link throughput %.1f MB/s (tandem_kv_link_throughput_bytes_per_second on %s)", bps/1e6, p.ID),
		fmt.Sprintf("%.0f KV bytes per token: a %d-token prompt moves %.1f MiB, %v on this link", perToken, d.cfg.ReferencePromptTokens, bytes/(1<<20), est.Round(time.Millisecond)),
	}
	if n, sum := pm.histogram("tandem_kv_transfer_seconds", labels); n > 0 {
		c.Evidence = append(c.Evidence, fmt.Sprintf("measured: %d transfers, mean %v", n, time.Duration(sum/float64(n)*float64(time.Second)).Round(time.Millisecond)))
	}
	if len(reasons) > 0 {
		var rs []string
		for k, v := range reasons {
			rs = append(rs, fmt.Sprintf("%s=%.0f", k, v))
		}
		slices.Sort(rs)
		c.Evidence = append(c.Evidence, "frontend disagg decisions: "+strings.Join(rs, " "))
	}
	c.Verdict, c.Summary = OK, fmt.Sprintf("%.1f MB/s: a %d-token prompt's KV crosses in %v (budget %v)", bps/1e6, d.cfg.ReferencePromptTokens, est.Round(time.Millisecond), d.cfg.MaxTransferTime)
	if est > d.cfg.MaxTransferTime {
		c.Verdict = Fail
		c.Summary = fmt.Sprintf("slow link: %.1f MB/s adds %v to a %d-token prompt's TTFT (budget %v)", bps/1e6, est.Round(time.Millisecond), d.cfg.ReferencePromptTokens, d.cfg.MaxTransferTime)
		c.Fix = fmt.Sprintf("put %s and %s on a faster link (one host, or an RDMA/NVLink-class network), or serve them aggregated (--disagg never; --disagg auto prices each request on this link and prefills locally when it loses, counted in tandem_disagg_decisions_total{reason=\"local_cheaper\"}); never --disagg always on it", p.ID, dc.ID)
	}
	d.add(c)
}
