package identity

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/windows"
)

// On Windows a file's permission bits say nothing about who may read it:
// its discretionary ACL does. These checks stand where the mode and owner
// checks stand on Unix:
//
//   - a key file is refused unless only trusted trustees may read it;
//   - a trust file (allow-list, known executors) is refused unless only
//     trusted trustees may change it;
//   - key and known-executors files we create get a protected DACL (no
//     inherited entries) granting the current user alone.
//
// Trusted trustees are the current user, LocalSystem and the built-in
// Administrators group: the last two can read every file anyway. A file
// must also be owned by one of them (its owner may rewrite its DACL). The
// reading is conservative: deny entries are not credited, and an entry of
// a type this code does not know (object or callback entries, which a
// plain file does not carry) refuses the file.

// Access rights that let a trustee read a file's contents, or give itself
// the right to (WRITE_DAC, WRITE_OWNER).
const aclReadRights = windows.FILE_READ_DATA | windows.GENERIC_READ | windows.GENERIC_ALL |
	windows.MAXIMUM_ALLOWED | windows.WRITE_DAC | windows.WRITE_OWNER

// Access rights that let a trustee change a file's contents, or give itself
// the right to.
const aclWriteRights = windows.FILE_WRITE_DATA | windows.FILE_APPEND_DATA | windows.GENERIC_WRITE |
	windows.GENERIC_ALL | windows.MAXIMUM_ALLOWED | windows.WRITE_DAC | windows.WRITE_OWNER

// ACE types (winnt.h) that a file's DACL may carry.
const (
	aceTypeAccessAllowed = 0x0
	aceTypeAccessDenied  = 0x1
)

// checkKeyFileACL refuses (ErrInsecureKeyFile) a key file that a trustee
// other than the current user, SYSTEM or Administrators may read.
func checkKeyFileACL(f *os.File, path string) error {
	who, err := untrustedAccess(f, aclReadRights)
	if err != nil {
		return fmt.Errorf("identity: key file %s: %v (%w)", path, err, ErrInsecureKeyFile)
	}
	if who != "" {
		return fmt.Errorf("identity: key file %s may be read by %s, not only by the current user; run: icacls \"%s\" /inheritance:r /grant:r \"%%USERNAME%%:F\" (%w)",
			path, who, path, ErrInsecureKeyFile)
	}
	return nil
}

// checkTrustFileACL refuses a trust file that a trustee other than the
// current user, SYSTEM or Administrators may change.
func checkTrustFileACL(f *os.File, kind, path string) error {
	who, err := untrustedAccess(f, aclWriteRights)
	if err != nil {
		return fmt.Errorf("identity: %s %s: %v", kind, path, err)
	}
	if who != "" {
		return fmt.Errorf("identity: %s %s may be changed by %s; run: icacls \"%s\" /inheritance:r /grant:r \"%%USERNAME%%:F\"",
			kind, path, who, path)
	}
	return nil
}

// restrictToUser replaces f's DACL with a protected one (no inherited
// entries) granting the current user full access and nobody else
// anything. It writes the security descriptor as given, through a handle
// of its own opened for WRITE_DAC (f's handle was not: os.OpenFile asks
// for read and write access only), rather than with SetNamedSecurityInfo,
// whose inheritance handling Wine 8 gets wrong (it adds the parent's
// inheritable entries to a protected DACL).
func restrictToUser(f *os.File) error {
	user, err := currentUserSID()
	if err != nil {
		return err
	}
	acl, err := windows.ACLFromEntries([]windows.EXPLICIT_ACCESS{{
		AccessPermissions: fileAllAccess,
		AccessMode:        windows.GRANT_ACCESS,
		Inheritance:       windows.NO_INHERITANCE,
		Trustee: windows.TRUSTEE{
			TrusteeForm:  windows.TRUSTEE_IS_SID,
			TrusteeType:  windows.TRUSTEE_IS_USER,
			TrusteeValue: windows.TrusteeValueFromSID(user),
		},
	}}, nil)
	if err != nil {
		return fmt.Errorf("build the file's ACL: %w", err)
	}
	sd, err := windows.NewSecurityDescriptor()
	if err != nil {
		return fmt.Errorf("build the file's security descriptor: %w", err)
	}
	if err := sd.SetDACL(acl, true, false); err != nil {
		return fmt.Errorf("build the file's security descriptor: %w", err)
	}
	if err := sd.SetControl(windows.SE_DACL_PROTECTED, windows.SE_DACL_PROTECTED); err != nil {
		return fmt.Errorf("build the file's security descriptor: %w", err)
	}
	name, err := windows.UTF16PtrFromString(f.Name())
	if err != nil {
		return err
	}
	h, err := windows.CreateFile(name, windows.WRITE_DAC|windows.READ_CONTROL,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil,
		windows.OPEN_EXISTING, windows.FILE_FLAG_OPEN_REPARSE_POINT|windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		return fmt.Errorf("restrict %s to the current user: open it: %w", f.Name(), err)
	}
	defer windows.CloseHandle(h)
	err = windows.SetKernelObjectSecurity(h, windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, sd)
	if err != nil {
		return fmt.Errorf("restrict %s to the current user: %w", f.Name(), err)
	}
	return nil
}

// fileAllAccess is FILE_ALL_ACCESS (winnt.h): every right on a file,
// spelled out rather than GENERIC_ALL, which a descriptor written as given
// would keep unmapped.
const fileAllAccess = windows.STANDARD_RIGHTS_REQUIRED | windows.SYNCHRONIZE | 0x1ff

// untrustedAccess returns the name of an untrusted trustee holding any of
// rights on f (or its owner, if that is not trusted), "" if there is none.
func untrustedAccess(f *os.File, rights windows.ACCESS_MASK) (string, error) {
	sd, err := windows.GetSecurityInfo(windows.Handle(f.Fd()), windows.SE_FILE_OBJECT,
		windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return "", fmt.Errorf("read its security descriptor: %w", err)
	}
	trusted, err := trustedSIDs()
	if err != nil {
		return "", err
	}
	isTrusted := func(sid *windows.SID) bool {
		for _, t := range trusted {
			if sid.Equals(t) {
				return true
			}
		}
		return false
	}
	owner, _, err := sd.Owner()
	if err != nil || owner == nil {
		return "", fmt.Errorf("it has no owner")
	}
	if !isTrusted(owner) {
		return "its owner " + sidName(owner), nil
	}
	dacl, _, err := sd.DACL()
	if err != nil || dacl == nil {
		// No DACL at all grants everyone every right.
		return "everyone (the file has no DACL)", nil
	}
	for i := uint32(0); i < uint32(dacl.AceCount); i++ {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			return "", fmt.Errorf("read entry %d of its DACL: %w", i, err)
		}
		if ace.Header.AceFlags&windows.INHERIT_ONLY_ACE != 0 {
			continue // applies to children, not to this file
		}
		switch ace.Header.AceType {
		case aceTypeAccessDenied:
			continue
		case aceTypeAccessAllowed:
			sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart))
			if ace.Mask&rights != 0 && !isTrusted(sid) {
				return sidName(sid), nil
			}
		default:
			return fmt.Sprintf("an access entry of type %#x that outpost does not read", ace.Header.AceType), nil
		}
	}
	return "", nil
}

// trustedSIDs: the current user, LocalSystem and Administrators.
func trustedSIDs() ([]*windows.SID, error) {
	user, err := currentUserSID()
	if err != nil {
		return nil, err
	}
	system, err := windows.CreateWellKnownSid(windows.WinLocalSystemSid)
	if err != nil {
		return nil, fmt.Errorf("the LocalSystem SID: %w", err)
	}
	admins, err := windows.CreateWellKnownSid(windows.WinBuiltinAdministratorsSid)
	if err != nil {
		return nil, fmt.Errorf("the Administrators SID: %w", err)
	}
	return []*windows.SID{user, system, admins}, nil
}

// currentUserSID is the SID of the user this process runs as.
func currentUserSID() (*windows.SID, error) {
	tu, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return nil, fmt.Errorf("the current user's SID: %w", err)
	}
	return tu.User.Sid.Copy()
}

// sidName names sid for a message: DOMAIN\account (SID), or the SID alone.
func sidName(sid *windows.SID) string {
	s := sid.String()
	if account, domain, _, err := sid.LookupAccount(""); err == nil && account != "" {
		if domain != "" {
			account = domain + `\` + account
		}
		return account + " (" + s + ")"
	}
	return s
}
