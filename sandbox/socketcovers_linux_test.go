//go:build linux

package sandbox

import (
	"fmt"
	"slices"
	"testing"
)

func TestSocketCoversStayWithinTheMountBound(t *testing.T) {
	sp := spec{Dir: "/home/victim/ws", ReadWrite: []string{"/home/victim/ws", "/tmp"}, ReadOnly: []string{"/", "/srv/data"}}
	hideable := socketDirHideable(sp)
	var flood []string
	for i := range 3000 {
		flood = append(flood, fmt.Sprintf("/home/attacker/ws/a/s%d", i), fmt.Sprintf("/home/attacker/ws/b%d/s", i))
	}
	legit := []string{"/run/user/0/bus", "/run/dbus/system_bus_socket", "/var/run/docker.sock"}
	// Few enough: every socket on its own.
	files, dirs, err := socketCovers(legit, hideable, 4)
	if err != nil || len(dirs) != 0 || !slices.Equal(files, legit) {
		t.Fatalf("few sockets: %v %v %v", files, dirs, err)
	}
	// A flood: its directory hidden whole, the others still covered one by one.
	files, dirs, err = socketCovers(append(append([]string(nil), legit...), flood...), hideable, 64)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dirs, []string{"/home/attacker/ws"}) || !slices.Equal(files, legit) {
		t.Fatalf("flood: files %v dirs %v", files, dirs)
	}
	// Never hidden: the top of the tree, system directories, or anything
	// at or above what the command is given.
	for _, d := range []string{"/home", "/run", "/usr/lib", "/home/victim", "/home/victim/ws", "/tmp/x", "/srv/data", "/srv"} {
		if hideable(d) {
			t.Errorf("%s must not be hideable", d)
		}
	}
	for _, d := range []string{"/home/attacker/ws", "/run/user/0", "/srv/other"} {
		if !hideable(d) {
			t.Errorf("%s should be hideable", d)
		}
	}
	// Sockets only where nothing may be hidden: refused, not half covered.
	var stuck []string
	for i := range 10 {
		stuck = append(stuck, fmt.Sprintf("/home/victim/s%d", i))
	}
	if _, _, err := socketCovers(stuck, hideable, 4); err == nil {
		t.Fatal("sockets above the workspace were half covered")
	}
}
