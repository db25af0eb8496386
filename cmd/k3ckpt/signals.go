package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"

	"github.com/k3ckpt/k3ckpt/internal/termtext"
)

// stopSignals are the signals that end a run: Ctrl-C, kill's default and a
// closed terminal or ssh session. All three are handled alike.
var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// cancellable names the commands that stop on a cancelled context, removing
// their temporaries and releasing DST's lock. Any other command stops at once
// on a signal (it leaves nothing a rerun must clean up, or cannot be cut short).
var cancellable = map[string]bool{"convert": true, "shard": true, "export": true, "reassemble": true, "verify": true}

// interrupt watches for stopSignals during one run.
type interrupt struct {
	mu      sync.Mutex
	sig     syscall.Signal
	command string
	ch      chan os.Signal
}

// catchSignals cancels the run's context on the first stop signal; a second
// one ends the process at once (the default action is restored).
func catchSignals(cancel context.CancelFunc, stderr io.Writer) *interrupt {
	in := &interrupt{ch: make(chan os.Signal, 1)}
	signal.Notify(in.ch, stopSignals...)
	go func() {
		s, ok := <-in.ch
		if !ok {
			return
		}
		signal.Reset(stopSignals...)
		in.mu.Lock()
		in.sig = s.(syscall.Signal)
		quit := !cancellable[in.command]
		in.mu.Unlock()
		cancel()
		if quit {
			os.Exit(in.report(stderr))
		}
	}()
	return in
}

// started records the command that runs, once its flags are parsed.
func (in *interrupt) started(name string) {
	in.mu.Lock()
	in.command = name
	in.mu.Unlock()
}

func (in *interrupt) stop() {
	signal.Stop(in.ch)
	close(in.ch)
}

// received is the signal that stopped the run, 0 when none did.
func (in *interrupt) received() syscall.Signal {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sig
}

// report prints the one wording of every interrupted command and returns
// the exit status of a run a signal stopped: 128 + its number.
func (in *interrupt) report(stderr io.Writer) int {
	in.mu.Lock()
	name, sig := in.command, in.sig
	in.mu.Unlock()
	if name == "" {
		name = "k3ckpt"
	}
	msg := fmt.Sprintf("%s interrupted (%s)", name, signalName(sig))
	if cancellable[name] && name != "verify" { // a writing command: its finished files are kept
		msg += ": the files finished so far are kept; run the same command again to continue (--restart starts over)"
	}
	fmt.Fprintln(stderr, "k3ckpt:", termtext.Lines(msg))
	return 128 + int(sig)
}

// signalName is a stop signal's conventional name, as kill -l spells it.
func signalName(s syscall.Signal) string {
	if i := slices.Index(stopSignals, os.Signal(s)); i >= 0 {
		return []string{"SIGINT", "SIGTERM", "SIGHUP"}[i]
	}
	return s.String()
}
