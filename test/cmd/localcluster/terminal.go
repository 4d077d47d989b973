package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// ownTerminal makes this process the leader of its own process group and
// that group the terminal's foreground group, when stdin is a terminal, so
// that Ctrl-C interrupts only this process and what it starts, not the
// make and go run that started it: they then wait for its clean exit, and
// `make demo` exits 0 instead of reporting the interrupt as an error. The
// returned function gives the terminal back to the original group.
func ownTerminal() (restore func()) {
	fd := int(os.Stdin.Fd())
	orig, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil {
		return func() {} // not a terminal
	}
	if err := unix.Setpgid(0, 0); err != nil {
		return func() {}
	}
	setForeground := func(pgid int) error {
		// A background group that sets the foreground group gets SIGTTOU
		// unless it ignores it.
		signal.Ignore(syscall.SIGTTOU)
		defer signal.Reset(syscall.SIGTTOU)
		return unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgid)
	}
	if err := setForeground(unix.Getpgrp()); err != nil {
		_ = unix.Setpgid(0, orig)
		return func() {}
	}
	return func() { _ = setForeground(orig) }
}
