package peers

import (
	"strings"
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if p50, p99 := Percentiles(d); p50 != 50 || p99 != 99 {
		t.Fatalf("p50 %v p99 %v", p50, p99)
	}
	if d[0] != 100*time.Millisecond {
		t.Fatal("Percentiles sorted its argument")
	}
}

func TestTailBufferKeepsTheLastBytes(t *testing.T) {
	b := NewTailBuffer(5)
	b.Write([]byte("abc"))
	b.Write([]byte(strings.Repeat("x", 3) + "yz"))
	if b.String() != "xxxyz" {
		t.Fatalf("%q", b.String())
	}
}
