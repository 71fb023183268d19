"""A reviewer in LibreOffice Calc (Debian's, headless, driven over UNO): open a workbook, type into
cells as a person does, and save it as .xlsx. Typing is the input line's text entered into the
selected cell (`.uno:EnterString`), so the cell's number format decides what the text becomes,
as it does for a person; `setFormula` would not ask it.

    /usr/bin/python3 tests/libreoffice_reviewer.py IN.xlsx OUT.xlsx TYPED.json PROFILE_DIR

TYPED.json: a list of [sheet, row, column name, text], rows counted from 1 as the spreadsheet
shows them; a column the header lacks is added after the last. Run by Debian's Python, which has
LibreOffice's `uno` module (python3-uno); `tests/test_review_workbook.py` runs it, in a process
group of its own that it ends, LibreOffice's processes with it.
"""

import contextlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import uno
from com.sun.star.beans import PropertyValue
from com.sun.star.connection import NoConnectException
from com.sun.star.lang import DisposedException


def prop(name, value):
    item = PropertyValue()
    item.Name, item.Value = name, value
    return item


def connect(pipe):
    local = uno.getComponentContext()
    resolver = local.ServiceManager.createInstanceWithContext(
        "com.sun.star.bridge.UnoUrlResolver", local
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            return resolver.resolve(f"uno:pipe,name={pipe};urp;StarOffice.ComponentContext")
        except NoConnectException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def column_of(sheet, name):
    """The header's column named `name`, added after the last one if it has none."""
    column = 0
    while sheet.getCellByPosition(column, 0).String not in (name, ""):
        column += 1
    return column


def main():
    source, target, typed, profile = (Path(arg).resolve() for arg in sys.argv[1:5])
    pipe = f"reviewer-{uuid.uuid4().hex}"
    office = subprocess.Popen(
        [
            "soffice",
            "--headless",
            "--invisible",
            "--norestore",
            f"--accept=pipe,name={pipe};urp;",
            f"-env:UserInstallation={profile.as_uri()}",
        ]
    )
    try:
        context = connect(pipe)
        desktop = context.ServiceManager.createInstanceWithContext(
            "com.sun.star.frame.Desktop", context
        )
        dispatcher = context.ServiceManager.createInstanceWithContext(
            "com.sun.star.frame.DispatchHelper", context
        )
        document = desktop.loadComponentFromURL(
            source.as_uri(), "_blank", 0, (prop("Hidden", True),)
        )
        controller = document.getCurrentController()

        def enter(cell, text):
            controller.select(cell)
            dispatcher.executeDispatch(
                controller.getFrame(), ".uno:EnterString", "", 0, (prop("StringName", text),)
            )

        for sheet_name, row, name, text in json.loads(typed.read_text()):
            sheet = document.Sheets.getByName(sheet_name)
            controller.setActiveSheet(sheet)
            column = column_of(sheet, name)
            if sheet.getCellByPosition(column, 0).String != name:
                enter(sheet.getCellByPosition(column, 0), name)
            enter(sheet.getCellByPosition(column, row - 1), text)
        document.storeToURL(target.as_uri(), (prop("FilterName", "Calc MS Excel 2007 XML"),))
        # Saved; the bridge closes as LibreOffice ends (closing the document first, headless
        # LibreOffice 7.4 crashed now and then).
        with contextlib.suppress(DisposedException):
            desktop.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            office.wait(timeout=30)
    finally:
        if office.poll() is None:
            office.kill()


if __name__ == "__main__":
    main()
