package verbs

import (
	"fmt"
	"math/bits"
	"strings"
)

// DeviceCapFlags are a device's capability flags (enum
// ibv_device_cap_flags; DeviceAttr.DeviceCapFlags).
type DeviceCapFlags uint32

// The flags libibverbs defines, with its values.
const (
	DeviceResizeMaxWR         DeviceCapFlags = 1 << 0
	DeviceBadPKeyCntr         DeviceCapFlags = 1 << 1
	DeviceBadQKeyCntr         DeviceCapFlags = 1 << 2
	DeviceRawMulti            DeviceCapFlags = 1 << 3
	DeviceAutoPathMig         DeviceCapFlags = 1 << 4
	DeviceChangePhyPort       DeviceCapFlags = 1 << 5
	DeviceUDAVPortEnforce     DeviceCapFlags = 1 << 6
	DeviceCurrQPStateMod      DeviceCapFlags = 1 << 7
	DeviceShutdownPort        DeviceCapFlags = 1 << 8
	DeviceInitType            DeviceCapFlags = 1 << 9
	DevicePortActiveEvent     DeviceCapFlags = 1 << 10
	DeviceSysImageGUID        DeviceCapFlags = 1 << 11
	DeviceRCRNRNAKGen         DeviceCapFlags = 1 << 12
	DeviceSRQResize           DeviceCapFlags = 1 << 13
	DeviceNNotifyCQ           DeviceCapFlags = 1 << 14
	DeviceMemWindow           DeviceCapFlags = 1 << 17
	DeviceUDIPCsum            DeviceCapFlags = 1 << 18
	DeviceXRC                 DeviceCapFlags = 1 << 20
	DeviceMemMgtExtensions    DeviceCapFlags = 1 << 21
	DeviceMemWindowType2A     DeviceCapFlags = 1 << 23
	DeviceMemWindowType2B     DeviceCapFlags = 1 << 24
	DeviceRCIPCsum            DeviceCapFlags = 1 << 25
	DeviceRawIPCsum           DeviceCapFlags = 1 << 26
	DeviceManagedFlowSteering DeviceCapFlags = 1 << 29
)

// deviceCapFlags is what goroce claims: only what it does. rxe's
// 0x01223c76 also has BAD_PKEY_CNTR and BAD_QKEY_CNTR (goroce keeps no such
// counters), AUTO_PATH_MIG and CHANGE_PHY_PORT (no alternate path, one
// port), UD_AV_PORT_ENFORCE (no UD QPs yet), PORT_ACTIVE_EVENT (no port
// events), SRQ_RESIZE (SRQs cannot be resized), MEM_WINDOW and
// MEM_WINDOW_TYPE_2B (no memory windows) and MEM_MGT_EXTENSIONS (LOCAL_INV
// and SEND_WITH_INV work, fast registration does not).
const deviceCapFlags = DeviceSysImageGUID | DeviceRCRNRNAKGen

var capFlagNames = [32]string{
	0: "RESIZE_MAX_WR", 1: "BAD_PKEY_CNTR", 2: "BAD_QKEY_CNTR", 3: "RAW_MULTI",
	4: "AUTO_PATH_MIG", 5: "CHANGE_PHY_PORT", 6: "UD_AV_PORT_ENFORCE", 7: "CURR_QP_STATE_MOD",
	8: "SHUTDOWN_PORT", 9: "INIT_TYPE", 10: "PORT_ACTIVE_EVENT", 11: "SYS_IMAGE_GUID",
	12: "RC_RNR_NAK_GEN", 13: "SRQ_RESIZE", 14: "N_NOTIFY_CQ", 17: "MEM_WINDOW",
	18: "UD_IP_CSUM", 20: "XRC", 21: "MEM_MGT_EXTENSIONS", 23: "MEM_WINDOW_TYPE_2A",
	24: "MEM_WINDOW_TYPE_2B", 25: "RC_IP_CSUM", 26: "RAW_IP_CSUM", 29: "MANAGED_FLOW_STEERING",
}

// Names returns the names of the set flags as ibv_devinfo prints them
// (SYS_IMAGE_GUID, …), lowest bit first; bits libibverbs does not define
// come last, as "Unknown flags: 0x…".
func (f DeviceCapFlags) Names() []string {
	var names []string
	var unknown DeviceCapFlags
	for rest := f; rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros32(uint32(rest))
		if capFlagNames[i] == "" {
			unknown |= 1 << i
		} else {
			names = append(names, capFlagNames[i])
		}
	}
	if unknown != 0 {
		names = append(names, fmt.Sprintf("Unknown flags: 0x%X", uint32(unknown)))
	}
	return names
}

func (f DeviceCapFlags) String() string {
	if f == 0 {
		return "0"
	}
	return strings.Join(f.Names(), "|")
}
