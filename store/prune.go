package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// PruneSiblings removes the event logs beside dir (the other folders of
// its parent) that nobody writes and that nothing was written to for
// maxAge: on a volume shared by a Deployment's pods, each pod records into
// a folder named after it, and the folders of pods that no longer exist
// would otherwise stay forever. A folder is an event log when it holds
// only the lock file and segments; it is in use while a process holds its
// lock, which the kernel releases when that process dies. A maxAge of 0
// removes nothing. It returns the folders removed.
func PruneSiblings(dir string, maxAge time.Duration, now time.Time) ([]string, error) {
	if maxAge <= 0 {
		return nil, nil
	}
	parent, self := filepath.Dir(filepath.Clean(dir)), filepath.Base(filepath.Clean(dir))
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil, fmt.Errorf("reading the folder of the event logs: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || e.Name() == self {
			continue
		}
		path := filepath.Join(parent, e.Name())
		newest, ok := eventLogAge(path)
		if !ok || now.Sub(newest) < maxAge {
			continue
		}
		lock, err := os.OpenFile(filepath.Join(path, lockName), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			lock.Close() // a live process writes it
			continue
		}
		err = os.RemoveAll(path)
		lock.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("removing the old event log %s: %w", path, err))
			continue
		}
		removed = append(removed, path)
	}
	return removed, errors.Join(errs...)
}

// VerdictsDir is the folder inside an event log that holds the log of the
// webhook's verdicts, a log of its own with its own bounds: a verdict
// decides no state, and anyone who reaches the webhook's port can have it
// give any number, so that no caller can push the events that decide
// state out of the main log.
const VerdictsDir = "verdicts"

// AuthenticatedVerdictsDir is the folder inside an event log, beside
// VerdictsDir, that holds the verdicts on reviews whose caller proved to
// be the API server (its client certificate): a log of their own with
// bounds of their own, so that a flood of unauthenticated reviews, which
// VerdictsDir holds, cannot turn them over.
const AuthenticatedVerdictsDir = "verdicts-authenticated"

// eventLogAge is the time of the newest file in path, when path is an
// event log: a lock file and segments, and perhaps its logs of verdicts
// (VerdictsDir, AuthenticatedVerdictsDir), nothing else.
func eventLogAge(path string) (time.Time, bool) {
	ents, err := os.ReadDir(path)
	if err != nil {
		return time.Time{}, false
	}
	var newest time.Time
	locked := false
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == lockName:
			locked = true
		case (name == VerdictsDir || name == AuthenticatedVerdictsDir) && e.IsDir():
			sub, ok := eventLogAge(filepath.Join(path, name))
			if !ok {
				return time.Time{}, false
			}
			newest = maxTime(newest, sub)
			continue
		case e.Type().IsRegular() && (strings.HasSuffix(name, segmentExt) || strings.HasSuffix(name, segmentExt+".damaged")):
		default:
			return time.Time{}, false
		}
		info, err := e.Info()
		if err != nil {
			return time.Time{}, false
		}
		newest = maxTime(newest, info.ModTime())
	}
	return newest, locked
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
