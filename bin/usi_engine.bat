@echo off
rem The USI engine for Windows GUIs (ShogiGUI registers .exe and .bat files): runs bin\usi_engine with
rem the project's Python: GUMBEL_SHOGI_PYTHON if set, else .venv\Scripts\python.exe (the README's set-up).
setlocal
set "REPO=%~dp0.."
set "PY=%GUMBEL_SHOGI_PYTHON%"
if not defined PY set "PY=%REPO%\.venv\Scripts\python.exe"
if not defined GUMBEL_SHOGI_PYTHON if not exist "%PY%" goto novenv
"%PY%" "%REPO%\bin\usi_engine" %*
exit /b %ERRORLEVEL%
:novenv
echo info string error: usi_engine: no "%PY%": run the README's Windows set-up first
echo usi_engine: error: no "%PY%": run the README's Windows set-up first 1>&2
exit /b 2
