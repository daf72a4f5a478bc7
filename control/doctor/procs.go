package doctor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Bounds on the /proc walk: a pid directory per process, a cmdline of a
// few KiB (the kernel caps it at ARG_MAX), an fd table of at most
// RLIMIT_NOFILE entries. Past these the doctor stops reading and says so.
const (
	maxProcPIDs    = 1 << 20
	maxCmdline     = 64 << 10
	maxFDsPerProc  = 1 << 20
	readDirBatch   = 1024
	maxShownPorts  = 16
	maxShownProcs  = 32
	defaultProcDir = "/proc"
)

// proc is one process the doctor looked at.
type proc struct {
	PID     int
	Argv    []string
	Listens []netip.AddrPort
	// FDsUnreadable: its fd table could not be read (another user's
	// process), so its sockets are unknown.
	FDsUnreadable bool
}

// sameHost reports whether the leftover check runs: "on", "off", or
// "auto" (the default): on when the frontend's URL names a loopback
// address, since only then is this host surely the deployment's.
func sameHost(mode, frontendURL string) (bool, error) {
	switch mode {
	case "on":
		return true, nil
	case "off":
		return false, nil
	case "", "auto":
	default:
		return false, fmt.Errorf("doctor: same-host mode %q: want auto, on or off", mode)
	}
	u, err := url.Parse(frontendURL)
	if err != nil {
		return false, nil
	}
	h := u.Hostname()
	if h == "localhost" {
		return true, nil
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback(), nil
}

// leftovers finds processes named like Tandem's on this host that listen
// on TCP ports no discovery record and not the frontend names: a worker
// whose record was removed but which still runs (holding its GPU, its
// ports), a frontend from an earlier run, a `tandem serve` left in a
// terminal.
func (d *run) leftovers() {
	on, _ := sameHost(d.cfg.SameHost, d.cfg.FrontendURL) // validated in Run
	if !on {
		return
	}
	c := Check{ID: IDLeftovers, Verdict: OK}
	if d.cfg.Registry == nil {
		// Without records every worker would look left over.
		c.Summary = "not checked: which processes are the deployment's needs its discovery records (pass the --discovery flags)"
		d.add(c)
		return
	}
	if !d.readRec {
		c.Verdict, c.Summary = Warn, "not checked: the discovery records could not be read, so every process would look unknown"
		c.Fix = "fix the discovery.read check first"
		d.add(c)
		return
	}
	known := d.knownPorts()
	procs, notes, err := scanProcs(d.cfg.ProcDir, d.cfg.ProcessNames, os.Getpid())
	if err != nil {
		c.Verdict, c.Summary = Warn, "not checked: "+d.cfg.ProcDir+" cannot be read"
		c.Evidence = []string{err.Error()}
		c.Fix = "run the doctor on the deployment's host (Linux, with /proc mounted), or pass --same-host off"
		d.add(c)
		return
	}
	var odd []string
	var pids []string
	unreadable := 0
	for _, p := range procs {
		if p.FDsUnreadable {
			unreadable++
			continue
		}
		if len(p.Listens) == 0 {
			continue // a client (tandem bench, certs): holds no port
		}
		mine := false
		for _, a := range p.Listens {
			if known[a.Port()] {
				mine = true
				break
			}
		}
		if mine {
			continue
		}
		ports := make([]string, 0, len(p.Listens))
		for _, a := range p.Listens[:min(len(p.Listens), maxShownPorts)] {
			ports = append(ports, a.String())
		}
		if len(odd) < maxShownProcs {
			odd = append(odd, fmt.Sprintf("pid %d listens on %s: %.300s", p.PID, strings.Join(ports, ", "), strings.Join(p.Argv, " ")))
		}
		pids = append(pids, strconv.Itoa(p.PID))
	}
	c.Evidence = append(c.Evidence, fmt.Sprintf("%d %s processes on this host; %d ports known to the frontend and the records", len(procs), strings.Join(d.cfg.ProcessNames, "/"), len(known)))
	c.Evidence = append(c.Evidence, notes...)
	if unreadable > 0 {
		c.Evidence = append(c.Evidence, fmt.Sprintf("%d processes' sockets unreadable (other users' processes: run the doctor as their user or root to check them)", unreadable))
	}
	if len(pids) == 0 {
		c.Summary = fmt.Sprintf("no leftover process: every listening %s process is the frontend or a registered worker", strings.Join(d.cfg.ProcessNames, "/"))
		d.add(c)
		return
	}
	c.Verdict = Warn
	c.Summary = fmt.Sprintf("%d leftover process(es) listen on ports no record and not the frontend names", len(pids))
	c.Evidence = append(c.Evidence, odd...)
	c.Fix = fmt.Sprintf("if they are left over from an earlier run, stop them: kill -TERM %s (they drain and exit; kill -KILL after --drain-timeout); a frontend replica or a worker of another deployment on this host looks the same: pass that frontend's --frontend and discovery flags to check it instead", strings.Join(pids, " "))
	d.add(c)
}

// knownPorts is every TCP port the frontend and the records name.
func (d *run) knownPorts() map[uint16]bool {
	known := map[uint16]bool{}
	add := func(addr string) {
		if addr == "" {
			return
		}
		if u, err := url.Parse(addr); err == nil && u.Host != "" {
			addr = u.Host // tcp://host:port, http://host:port
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return
		}
		if p, err := strconv.ParseUint(port, 10, 16); err == nil && p > 0 {
			known[uint16(p)] = true
		}
	}
	if u, err := url.Parse(d.cfg.FrontendURL); err == nil {
		if u.Port() == "" {
			add(u.Hostname() + map[string]string{"https": ":443"}[u.Scheme] + map[string]string{"http": ":80"}[u.Scheme])
		} else {
			add(u.Host)
		}
	}
	for _, r := range d.records {
		add(r.RequestPlane)
		add(r.MetricsAddr)
		add(r.KVEvents.Endpoint)
		add(r.KVEvents.ReplayEndpoint)
		add(r.KVTransfer.Addr)
	}
	return known
}

// scanProcs returns the processes under root whose program is named one
// of names (the base name of argv[0], else /proc/PID/comm), except self,
// with their listening TCP sockets.
func scanProcs(root string, names []string, self int) ([]proc, []string, error) {
	dir, err := os.Open(root)
	if err != nil {
		return nil, nil, err
	}
	defer dir.Close()
	var pids []int
	for len(pids) < maxProcPIDs {
		ents, err := dir.ReadDir(readDirBatch)
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 && pid != self {
				pids = append(pids, pid)
			}
		}
		if errors.Is(err, io.EOF) || len(ents) == 0 {
			break
		}
		if err != nil {
			return nil, nil, err
		}
	}
	var notes []string
	var procs []proc
	for _, pid := range pids {
		pdir := filepath.Join(root, strconv.Itoa(pid))
		argv := readCmdline(pdir)
		name := ""
		if len(argv) > 0 {
			name = filepath.Base(argv[0])
		} else if b, err := readBounded(filepath.Join(pdir, "comm"), 64); err == nil {
			name = strings.TrimSpace(string(b)) // a kernel thread or a zombie
		}
		if !slices.Contains(names, name) {
			continue
		}
		p := proc{PID: pid, Argv: argv}
		inodes, err := socketInodes(filepath.Join(pdir, "fd"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // it exited while we looked
			}
			p.FDsUnreadable = true
			procs = append(procs, p)
			continue
		}
		if len(inodes) > 0 {
			// The tables are per network namespace: read the process's own.
			socks, err := listening(pdir)
			if err != nil {
				notes = append(notes, fmt.Sprintf("pid %d: %v", pid, err))
			}
			for _, s := range socks {
				if inodes[s.Inode] {
					p.Listens = append(p.Listens, s.Addr)
				}
			}
		}
		procs = append(procs, p)
	}
	return procs, notes, nil
}

// listening reads a process's /proc/PID/net/tcp and tcp6.
func listening(pdir string) ([]listenSocket, error) {
	var out []listenSocket
	var errs []error
	for _, t := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(pdir, "net", t))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // no IPv6: no tcp6
				errs = append(errs, err)
			}
			continue
		}
		socks, err := parseProcNetTCP(f)
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("net/%s: %w", t, err))
		}
		out = append(out, socks...)
	}
	return out, errors.Join(errs...)
}

// socketInodes lists the inodes of a process's sockets ("socket:[N]"
// links in its fd directory).
func socketInodes(fdDir string) (map[uint64]bool, error) {
	dir, err := os.Open(fdDir)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	out := map[uint64]bool{}
	seen := 0
	for seen < maxFDsPerProc {
		ents, err := dir.ReadDir(readDirBatch)
		seen += len(ents)
		for _, e := range ents {
			l, lerr := os.Readlink(filepath.Join(fdDir, e.Name()))
			if lerr != nil {
				continue // closed while we looked
			}
			if s, ok := strings.CutPrefix(l, "socket:["); ok {
				if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
					out[n] = true
				}
			}
		}
		if errors.Is(err, io.EOF) || len(ents) == 0 {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readCmdline(pdir string) []string {
	b, err := readBounded(filepath.Join(pdir, "cmdline"), maxCmdline)
	if err != nil || len(b) == 0 {
		return nil
	}
	var argv []string
	for _, a := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}) {
		argv = append(argv, string(a))
	}
	return argv
}

// readBounded reads at most limit bytes of a file (a longer one is cut:
// a cmdline past 64 KiB still names its program first).
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
