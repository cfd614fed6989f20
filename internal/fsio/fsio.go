// Package fsio writes file data in pieces the page cache takes cheaply.
//
// A large write(2) into a file on ext4 (Linux 6.x, large folios) asks the
// page cache for large folios, which come from high-order free blocks. On
// virtual machines that report free memory back to the host (free page
// reporting, virtio-balloon: Firecracker, many clouds) those are the
// blocks the host has taken back, so every page of the folio faults into
// the host on first touch. Measured here: 1 MiB writes of a 1 GiB file
// cost 2-3.5 CPU-s in the kernel on four runs of six (16-128 KiB writes:
// 0.3-0.7 on every run); with the destination of the run before just
// removed, as the bench copies do, even 128 KiB pieces spent 8.7% of the
// machine's samples copying into the page cache against 1.5-1.8% with
// 16-32 KiB. Writing in pieces of at most PieceBytes costs more system
// calls (32 per MiB, ~0.1 CPU-s per GiB) and keeps large copies at the
// speed of the rest of the path.
package fsio

import "os"

// PieceBytes is the largest single write(2) these helpers issue.
const PieceBytes = 32 << 10

// WriteAt writes b at off in pieces of at most PieceBytes.
func WriteAt(f *os.File, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := f.WriteAt(b[n:min(len(b), n+PieceBytes)], off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Write writes b at f's offset in pieces of at most PieceBytes.
func Write(f *os.File, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := f.Write(b[n:min(len(b), n+PieceBytes)])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
