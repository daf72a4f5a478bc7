package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TierDisk is a KV disk tier on this host the doctor checks for space: the
// --kv-offload-disk-dir its workers write under and how many bytes they may
// hold there together (each worker's --kv-offload-disk-bytes, summed over
// the workers that write there).
type TierDisk struct {
	Dir   string
	Bytes int64
}

// maxTierWalk bounds the files counted under a tier directory: a disk tier
// holds one file per block, and a walk past this many says so.
const maxTierWalk = 1 << 20

// tierSpace checks each configured disk tier: its directory exists and
// its file system has room for what the tier may still write (the
// configured size less what its files hold now). A tier short of space
// fills the disk, and its writes then fail and degrade to recompute
// (native's kv_tier_disk diagnostic) while other users of the disk fail
// outright.
func (d *run) tierSpace() {
	for _, t := range d.cfg.TierDisks {
		d.add(checkTierDisk(t, statFree))
	}
}

// checkTierDisk is tierSpace's verdict for one tier; free reports the
// bytes an unprivileged writer may still use on dir's file system.
func checkTierDisk(t TierDisk, free func(dir string) (int64, error)) Check {
	c := Check{ID: IDTierSpace, Subject: t.Dir}
	st, err := os.Stat(t.Dir)
	if err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		c.Verdict, c.Summary = Fail, "the disk tier's directory cannot be used"
		c.Evidence = []string{err.Error()}
		c.Fix = "create it (mkdir -p) on a local disk, or point --kv-offload-disk-dir at one"
		return c
	}
	avail, err := free(t.Dir)
	if err != nil {
		c.Verdict, c.Summary = Warn, "not checked: the file system's free space cannot be read"
		c.Evidence = []string{err.Error()}
		return c
	}
	used, files, err := dirBytes(t.Dir)
	if err != nil {
		c.Verdict, c.Summary = Warn, "not checked: the tier's files cannot be counted"
		c.Evidence = []string{err.Error()}
		return c
	}
	need := max(t.Bytes-used, 0)
	c.Evidence = []string{fmt.Sprintf("configured %d bytes; its %d files hold %d; the file system has %d free", t.Bytes, files, used, avail)}
	if avail < need {
		c.Verdict = Fail
		c.Summary = fmt.Sprintf("the disk tier may still write %d bytes but only %d are free", need, avail)
		c.Fix = fmt.Sprintf("lower --kv-offload-disk-bytes so the workers writing here hold at most %d bytes together, free space, or move --kv-offload-disk-dir to a larger disk", used+avail)
		return c
	}
	c.Verdict = OK
	c.Summary = fmt.Sprintf("room for the configured %d bytes (%d free)", t.Bytes, avail)
	return c
}

// dirBytes sums the sizes of the regular files under dir, at most
// maxTierWalk of them.
func dirBytes(dir string) (bytes int64, files int, err error) {
	errTooMany := errors.New("too many files")
	err = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		if files++; files > maxTierWalk {
			return errTooMany
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		bytes += info.Size()
		return nil
	})
	if errors.Is(err, errTooMany) {
		return bytes, files, fmt.Errorf("more than %d files under %s", maxTierWalk, dir)
	}
	return bytes, files, err
}
