package remotefs

// fdPathOS: FreeBSD cannot say reliably where a descriptor is (fsroot_bsd.go).
func fdPathOS(int) (string, error) { return "", errUnplaced }
