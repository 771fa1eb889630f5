; The Windows installer (NSIS 3; `makensis` from Debian's `nsis` or a Windows runner's NSIS).
; Paths inside are relative to this file (makensis works in its folder). Built by scripts/check-windows.sh here (GNU toolchain, CPU) and by
; .github/workflows/windows.yml on a Windows runner (MSVC, CUDA):
;
;   makensis -DVERSION=0.1.0 -DEXE=path\to\strata-desk.exe -DOUT=path\to\installer.exe \
;            [-DDLL_DIR=dir-with-llama.cpp's-DLLs] [-DCUDA_DIR=dir-with-the-CUDA-runtime-DLLs] \
;            packaging/windows/strata-desk.nsi
;
; With DLL_DIR, every DLL there goes beside the program: the GNU build's llama.cpp
; (libllama.dll, libllama-common.dll, ggml*.dll, a CPU backend per instruction-set level,
; ggml-cpu-<variant>.dll, and the Vulkan backend, ggml-vulkan.dll, which the program loads
; only where a GPU driver installed vulkan-1.dll: one program for every machine). The install folder is the program's own, so
; the uninstaller removes every DLL in it.
;
; Installs to Program Files (administrator rights) with a Start menu entry and an
; uninstaller registered in Apps & features. Installing over an older version replaces it in
; place; running an older installer puts the older version back. The uninstaller removes the
; program and its entries and keeps the user's config, models and logs (%APPDATA%\strata and
; %LOCALAPPDATA%\strata). With CUDA_DIR, the CUDA runtime DLLs llama-cpp-sys-2 links
; dynamically (cudart64_12, cublas64_12, cublasLt64_12) go beside the program, where Windows
; looks first: the user needs the NVIDIA driver, not the CUDA toolkit.
; Silent: `installer.exe /S` (and `/D=C:\Other\Folder` last, to choose the folder);
; `Uninstall.exe /S`.

; A 64-bit installer (the program is 64-bit only; a 32-bit one would also need 32-bit Wine).
Target amd64-unicode
!ifndef VERSION
  !error "give -DVERSION=x.y.z"
!endif
!ifndef EXE
  !error "give -DEXE=path\to\strata-desk.exe"
!endif
!ifndef OUT
  !define OUT "strata-desk-${VERSION}-setup.exe"
!endif
!define PRODUCT "Strata Desk"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\StrataDesk"

!include "MUI2.nsh"
!include "x64.nsh"

Name "${PRODUCT} ${VERSION}"
OutFile "${OUT}"
InstallDir "$PROGRAMFILES64\${PRODUCT}"
InstallDirRegKey HKLM "${UNINSTALL_KEY}" "InstallLocation"
RequestExecutionLevel admin
SetCompressor /SOLID lzma
!define MUI_ICON "../../assets/strata-desk.ico"
!define MUI_UNICON "../../assets/strata-desk.ico"
!define MUI_FINISHPAGE_RUN "$INSTDIR\strata-desk.exe"

!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

Function .onInit
  ${IfNot} ${RunningX64}
    MessageBox MB_ICONSTOP "${PRODUCT} needs 64-bit Windows." /SD IDOK
    Abort
  ${EndIf}
  SetRegView 64
  SetShellVarContext all
FunctionEnd

Function un.onInit
  SetRegView 64
  SetShellVarContext all
FunctionEnd

Section "Strata Desk" Main
  SectionIn RO
  SetOutPath "$INSTDIR"
  File "/oname=strata-desk.exe" "${EXE}"
  File "/oname=README.md" "../../README.md"
  File "/oname=DEPLOYMENT.md" "../../docs/DEPLOYMENT.md"
!ifdef DLL_DIR
  File "${DLL_DIR}\*.dll"
!endif
!ifdef CUDA_DIR
  File "${CUDA_DIR}\cudart64_12.dll"
  File "${CUDA_DIR}\cublas64_12.dll"
  File "${CUDA_DIR}\cublasLt64_12.dll"
!endif
  WriteUninstaller "$INSTDIR\Uninstall.exe"
  CreateShortCut "$SMPROGRAMS\${PRODUCT}.lnk" "$INSTDIR\strata-desk.exe" "" "$INSTDIR\strata-desk.exe" 0
  ; an older version's second program (the CPU-only one) and its entry: the one program
  ; now runs on every machine
  Delete "$INSTDIR\strata-desk-cpu.exe"
  Delete "$SMPROGRAMS\${PRODUCT} (CPU only).lnk"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "DisplayName" "${PRODUCT}"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "Publisher" "Strata Desk developers"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\strata-desk.exe"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\Uninstall.exe"'
  WriteRegStr HKLM "${UNINSTALL_KEY}" "QuietUninstallString" '"$INSTDIR\Uninstall.exe" /S'
  WriteRegDWORD HKLM "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKLM "${UNINSTALL_KEY}" "NoRepair" 1
SectionEnd

; Only what the installer put there: the user's config, models and logs stay.
Section "Uninstall"
  Delete "$INSTDIR\strata-desk.exe"
  Delete "$INSTDIR\strata-desk-cpu.exe"
  Delete "$INSTDIR\README.md"
  Delete "$INSTDIR\DEPLOYMENT.md"
  Delete "$INSTDIR\*.dll"
  Delete "$INSTDIR\Uninstall.exe"
  RMDir "$INSTDIR"
  Delete "$SMPROGRAMS\${PRODUCT}.lnk"
  Delete "$SMPROGRAMS\${PRODUCT} (CPU only).lnk"
  DeleteRegKey HKLM "${UNINSTALL_KEY}"
SectionEnd
