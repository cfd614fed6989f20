package main

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/windows"
)

// The local terminal of `outpost exec --tty` on Windows: a console, in
// virtual-terminal mode so that the remote side's escape sequences are
// interpreted and keys arrive as the sequences a Unix terminal sends.
// Windows has no SIGWINCH: the size is polled (resizePoll).

// resizePoll bounds how late a console resize reaches the remote PTY.
const resizePoll = 250 * time.Millisecond

func isTerminal(f *os.File) bool {
	var mode uint32
	return windows.GetConsoleMode(windows.Handle(f.Fd()), &mode) == nil
}

// termSize is the visible window of the console's screen buffer. An input
// handle has no screen buffer, so for stdin it asks stdout's.
func termSize(f *os.File) (rows, cols uint16, err error) {
	var info windows.ConsoleScreenBufferInfo
	h := windows.Handle(f.Fd())
	if f == os.Stdin {
		h = windows.Handle(os.Stdout.Fd())
	}
	if err := windows.GetConsoleScreenBufferInfo(h, &info); err != nil {
		return 0, 0, err
	}
	w := info.Window
	return uint16(w.Bottom - w.Top + 1), uint16(w.Right - w.Left + 1), nil
}

// makeRaw turns off line input, echo and Ctrl-C processing on the input
// console, and turns on virtual-terminal processing on both; it returns the
// function that restores both modes.
func makeRaw(f *os.File) (func(), error) {
	in := windows.Handle(f.Fd())
	var inMode uint32
	if err := windows.GetConsoleMode(in, &inMode); err != nil {
		return nil, err
	}
	raw := inMode&^(windows.ENABLE_ECHO_INPUT|windows.ENABLE_LINE_INPUT|windows.ENABLE_PROCESSED_INPUT) | windows.ENABLE_VIRTUAL_TERMINAL_INPUT
	if err := windows.SetConsoleMode(in, raw); err != nil {
		return nil, err
	}
	out := windows.Handle(os.Stdout.Fd())
	var outMode uint32
	outOK := windows.GetConsoleMode(out, &outMode) == nil &&
		windows.SetConsoleMode(out, outMode|windows.ENABLE_VIRTUAL_TERMINAL_PROCESSING|windows.DISABLE_NEWLINE_AUTO_RETURN) == nil
	return func() {
		windows.SetConsoleMode(in, inMode)
		if outOK {
			windows.SetConsoleMode(out, outMode)
		}
	}, nil
}

// watchResize polls the console size every resizePoll and calls f when it
// changed, until the returned stop is called.
func watchResize(f func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(resizePoll)
		defer t.Stop()
		rows, cols, _ := termSize(os.Stdin)
		for {
			select {
			case <-t.C:
				r, c, err := termSize(os.Stdin)
				if err == nil && (r != rows || c != cols) {
					rows, cols = r, c
					f()
				}
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}
