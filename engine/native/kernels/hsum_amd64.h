// Shared by the assembly kernels that end in hsum4's reduction
// (q8asm_amd64.s, f16asm_amd64.s): included, so the one order that makes
// their outputs bitwise the archsimd kernels' is written once.

// FOLD16 folds the 16 lanes of Z into the low 4 lanes of X (lanes j+8 onto
// j, then j+4 onto j): fold16 and the first step of hsum4.
#define FOLD16(Z, Y, X) \
	VEXTRACTF64X4 $1, Z, Y16; \
	VADDPS Y16, Y, Y; \
	VEXTRACTF32X4 $1, Y, X16; \
	VADDPS X16, X, X

// HSUM4 leaves in XA the four horizontal sums of the folded XA, XB, XC,
// XD (hsum4's two rounds of pairwise adds). VHADDPS has no EVEX form, so
// its operands are X0-X15.
#define HSUM4(XA, XB, XC, XD) \
	VHADDPS XB, XA, XA; \
	VHADDPS XD, XC, XC; \
	VHADDPS XC, XA, XA
