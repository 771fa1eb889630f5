#!/usr/bin/env bash
# Checks the tray icon over a private D-Bus session under Xvfb, with the simulated engine:
# the StatusNotifierItem registers; its menu's Preemption item (solo_priority, the rollback
# switch) turns preemption on from the defaults and off again, give_way untouched (saved); its
# "Long reads give way" item turns give_way off and back to left (saved); the tooltip says so;
# Quit closes the app with exit status 0 (closing the window would only hide it). The menu's
# items, by dbusmenu id: 1 Show/Hide, 2 Preemption, 3 Long reads give way, 4 the separator,
# 5 Quit.
#   scripts/tray-check.sh [path/to/strata-desk]     (needs Xvfb, dbus-daemon, curl)
set -euo pipefail
exe=${1:-target/debug/strata-desk}
config=$(mktemp --suffix=.json)
echo '{}' > "$config"
Xvfb :79 -screen 0 1280x860x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null; rm -f "$config"' EXIT
sleep 1
DISPLAY=:79 dbus-run-session -- bash -c '
  set -euo pipefail
  "$0" --engine sim --config "$1" --port 8099 2>/dev/null &
  app=$!
  sleep 8
  names() { dbus-send --session --dest=org.freedesktop.DBus --print-reply /org/freedesktop/DBus org.freedesktop.DBus.ListNames; }
  item=$(names | grep -o "org.kde.StatusNotifierItem[^\"]*" | head -1)
  [ -n "$item" ] || { echo "FAIL: no StatusNotifierItem on the bus"; exit 1; }
  echo "registered: $item"
  click() { dbus-send --session --print-reply --dest="$item" /MenuBar com.canonical.dbusmenu.Event int32:"$1" string:clicked variant:int32:0 uint32:0 >/dev/null; }
  settings() { curl -s localhost:8099/v1/scheduler | grep -o "\"\(solo_priority\|give_way\)\":[^,}]*" | sort -u | tr "\n" " "; }
  expect() { sleep 1.5; got=$(settings); [ "$got" = "$1" ] || { echo "FAIL: after $2: $got, not $1"; exit 1; }; echo "after $2: $got"; }
  click 2   # Preemption: off -> on
  expect "\"give_way\":\"left\" \"solo_priority\":true " "Preemption on"
  click 2   # Preemption: on -> off (the rollback): give_way stays
  expect "\"give_way\":\"left\" \"solo_priority\":false " "Preemption off"
  grep -q "\"solo_priority\": false" "$1" || { echo "FAIL: solo_priority off not saved"; exit 1; }
  click 3   # Long reads give way: off
  expect "\"give_way\":\"off\" \"solo_priority\":false " "give way off"
  grep -q "\"give_way\": \"off\"" "$1" || { echo "FAIL: give_way off not saved"; exit 1; }
  click 3   # and back to left
  expect "\"give_way\":\"left\" \"solo_priority\":false " "give way on"
  dbus-send --session --print-reply --dest="$item" /StatusNotifierItem org.freedesktop.DBus.Properties.Get string:org.kde.StatusNotifierItem string:ToolTip | grep "Strata Desk:"
  click 5   # Quit
  for _ in $(seq 20); do kill -0 $app 2>/dev/null || break; sleep 0.5; done
  if kill -0 $app 2>/dev/null; then echo "FAIL: Quit did not close the app"; exit 1; fi
  wait $app && echo "OK: Preemption on and off, give_way off and on, saved from the tray; Quit exited 0"
' "$exe" "$config"
