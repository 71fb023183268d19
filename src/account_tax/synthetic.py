"""SYNTHETIC ledger generator: made-up bookkeeping records shaped like the real use case.

Nothing here is real data, and the workflow never reads it by default: it exists to test and
benchmark the pipeline at any size (`scripts/make_ledger.py`). The shape follows a German/EU
chart of accounts: about 280 four-digit account codes, 21 of them without a single booking,
and a Zipf-like imbalance over the rest (at 1 M rows the largest class is thousands of times
the smallest). The memo carries account-specific vocabulary, the vendor and noise (invoice
numbers, periods, prefixes), so a classifier can learn the account but not trivially.

The output is a pure function of (rows, seed, dirty fraction, format): generation runs in
chunks, each from its own seeded random stream, so 10 M rows need a few hundred MB of memory.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import polars as pl

COLUMNS = (
    "entry_id",
    "date",
    "vendor",
    "memo",
    "amount",
    "currency",
    "department",
    "vat_type",
    "document_type",
    "account",
)
CHUNK_ROWS = 500_000
# The chart's vendors, amounts and vocabulary come from this fixed seed, not the run's seed:
# ledgers with different seeds are different samples of the same business.
CHART_SEED = 20_240_101
FIRST_DAY = np.datetime64("2021-01-01")
LAST_DAY = np.datetime64("2024-12-31")
# Zipf-Mandelbrot p(rank) ~ (rank + offset)^-exponent: about 24% of rows in the largest class
# and a largest/smallest ratio of about 3000 over 259 classes.
ZIPF_OFFSET = 2.0
ZIPF_EXPONENT = 1.8
MAX_DIRTY_FRACTION = 0.5

DIRTY_KINDS = (
    "bad_amount",
    "bad_date",
    "missing_label",
    "unknown_label",
    "duplicate",
    "invalid_utf8",
)
CSV_ONLY_KINDS = frozenset({"invalid_utf8"})

CURRENCIES = ("EUR", "USD", "GBP", "CHF")
FOREIGN_CURRENCY_WEIGHTS = (0.5, 0.3, 0.2)
DEPARTMENTS = (
    "finance",
    "sales",
    "marketing",
    "operations",
    "it",
    "hr",
    "management",
    "logistics",
    "production",
    "facilities",
)
VAT_TYPES = (
    "input19",
    "input7",
    "output19",
    "output7",
    "eu_supply",
    "eu_acquisition",
    "reverse_charge",
    "import",
    "export",
    "exempt",
    "none",
)
# Memo prefixes written by the system or person that books each document type.
DOCUMENT_PREFIXES = {
    "invoice": ("invoice", "inv", "RE", "Rechnung"),
    "credit_note": ("credit note", "CN", "Gutschrift"),
    "receipt": ("receipt", "Beleg", "Quittung"),
    "bank_statement": ("SEPA transfer", "Überweisung", "transfer"),
    "direct_debit": ("direct debit", "SEPA-Lastschrift", "DD"),
    "card_payment": ("card payment", "Kartenzahlung", "VISA"),
    "payroll": ("payroll", "Lohnabrechnung", "pay run"),
    "journal": ("journal", "Umbuchung", "adjustment"),
    "contract": ("contract", "Vertrag", "agreement"),
    "tax_notice": ("tax notice", "Bescheid", "assessment"),
}
DOCUMENT_TYPES = tuple(DOCUMENT_PREFIXES)
# Invoice, order and document numbers: digits that carry no information about the account.
REFERENCE_PREFIXES = ("inv ", "no. ", "#", "ref ", "order ", "KD-")
FILLERS = (
    "thank you",
    "as agreed",
    "see attachment",
    "partial payment",
    "final invoice",
    "reminder",
    "paid",
    "per email",
    "urgent",
    "corrected",
)
SURNAMES = (
    "Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Meyer", "Wagner", "Becker", "Schulz",
    "Hoffmann", "Schäfer", "Koch", "Bauer", "Richter", "Klein", "Wolf", "Schröder", "Neumann",
    "Schwarz", "Zimmermann", "Braun", "Krüger", "Hartmann", "Lange", "Werner", "Krause", "Lehmann",
    "Köhler", "Jäger", "Böhm", "Günther", "Dubois", "Rossi", "van Dijk", "Novak", "Svensson",
)  # fmt: skip
LEGAL_FORMS = ("GmbH", "GmbH", "GmbH", "AG", "KG", "GmbH & Co. KG", "e.K.", "OHG", "Ltd", "B.V.")
VENDORS_PER_FAMILY = 12
# Words as a Latin-1 system writes them: each letter in U+E0C0..U+E0FF stands in for the single
# byte 0xC0..0xFF (invalid alone in UTF-8) until the CSV text is encoded, since Polars strings
# must be valid UTF-8. In UTF-8 those stand-ins are EE 83 80..BF.
LATIN1_WORDS = ("Geb\ue0fchr", "M\ue0fcller", "Stra\ue0dfe", "\ue0c4nderung", "Pr\ue0e4mie")
LATIN1_STAND_IN = b"\xee\x83"

# Shares of rows that get each kind of noise: enough that no single token decides the account.
SIBLING_KEYWORD_SHARE = 0.06
FOREIGN_VENDOR_SHARE = 0.05
SECOND_KEYWORD_SHARE = 0.35
FAMILY_WORD_SHARE = 0.25
PREFIX_SHARE = 0.5
VENDOR_IN_MEMO_SHARE = 0.35
VENDOR_FIRST_SHARE = 0.3
REFERENCE_SHARE = 0.6
PERIOD_SHARE = 0.25
FILLER_SHARE = 0.12
UPPERCASE_MEMO_SHARE = 0.08
UPPERCASE_VENDOR_SHARE = 0.05
OTHER_DEPARTMENT_SHARE = 0.05
OTHER_VAT_SHARE = 0.06
CREDIT_NOTE_SHARE = 0.04
WEEKEND_MOVED_SHARE = 0.9
YEAR_END_ON_DEC_31_SHARE = 0.8


@dataclass(frozen=True)
class Family:
    """A group of related accounts that share vendors, amount scale and booking habits.

    `accounts` holds one account per line: `code|name|keyword; keyword|vat type|timing`, the
    last two optional (the family's defaults). A `!` after the code marks an account of the
    chart that has no bookings at all.
    """

    name: str
    weight: float
    median_amount: float
    amount_sigma: float
    vat_type: str
    document_types: tuple[str, ...]
    departments: tuple[str, ...]
    vendor_trades: tuple[str, ...]
    words: tuple[str, ...]
    accounts: str
    timing: str = "any"
    foreign_share: float = 0.02


FAMILIES = (
    Family(
        "intangible assets", 0.4, 1800, 1.0, "input19", ("invoice", "contract"),
        ("it", "management"), ("Software", "IT-Consulting", "Digitalagentur"),
        ("licence", "intangible", "capitalised"),
        """
        0120!|Patents|patent; patent filing; patent purchase
        0130|Trademarks and rights|trademark registration; brand rights; euipo filing; word mark
        0135|Purchased software|software licence; erp licence; perpetual license; cad software
        0140|Websites|website relaunch; web shop development; cms setup; landing pages
        0143!|Internally developed software|own development; capitalised development hours
        0150!|Goodwill|goodwill; business acquisition; purchase price allocation
        0170|Advance payments on intangibles|advance payment licence; milestone implementation
        """,
        foreign_share=0.2,
    ),
    Family(
        "land and buildings", 0.3, 12000, 1.3, "input19", ("invoice", "contract"),
        ("facilities", "management"), ("Bauunternehmen", "Architekturbüro", "Immobilien"),
        ("building", "property", "construction"),
        """
        0215!|Undeveloped land|land purchase; building plot; land register
        0235|Land with buildings|property purchase; notary contract property; land transfer tax
        0240|Commercial buildings|office building; warehouse construction; hall construction
        0250|Factory buildings|production hall; factory extension; plant building
        0270|Leasehold improvements|tenant improvements; leasehold fit-out; office conversion
        0280|Outdoor facilities|parking lot paving; fencing; outdoor lighting; yard surfacing
        0290|Residential buildings|staff apartments; residential unit; apartment building
        0700!|Assets under construction|construction in progress; partial invoice building site
        """,
    ),
    Family(
        "equipment", 1.2, 1500, 1.1, "input19", ("invoice",),
        ("production", "operations", "it", "facilities"),
        ("Maschinenbau", "Technik", "Büromöbel", "Elektro", "Werkzeughandel"),
        ("equipment", "machine", "asset purchase"),
        """
        0420|Technical equipment|compressor; production line; conveyor belt; cooling unit
        0440|Machinery|cnc machine; milling machine; lathe; hydraulic press
        0460|Machine tools|moulds; dies; cutting tools for machine
        0520|Passenger cars|company car; car purchase; new vehicle
        0540|Trucks and vans|delivery van; truck purchase; lorry; transporter
        0620|Tools|power tools; drill set; workshop tools; tool cabinet
        0635|Shop fittings|shop fitting; display counter; shelving system; sales counter
        0650|Office furniture|office desk; office chair; filing cabinet; conference table
        0660|Computer hardware|laptop; desktop computer; server; notebook
        0670|Low-value assets|monitor; small printer; tablet; headset; docking station
        0675|Asset pool items|collective item; asset pool; pooled asset
        0690|Other equipment|coffee machine; fridge; ladder; kitchen appliance
        0705|Advance payments on fixed assets|down payment machine; deposit equipment
        """,
    ),
    Family(
        "financial assets", 0.2, 20000, 1.4, "none", ("contract", "bank_statement"),
        ("finance", "management"), ("Beteiligungs", "Vermögensverwaltung", "Kreditbank"),
        ("investment", "shares", "financial"),
        """
        0800!|Shares in affiliated companies|subsidiary shares; affiliate share purchase
        0810!|Loans to affiliated companies|intercompany loan; loan to subsidiary
        0820|Participations|participation; equity stake; capital contribution
        0900|Long-term securities|bonds held; fund units; long-term securities
        0930|Other loans granted|employee loan; loan granted; shareholder loan receivable
        0940|Cooperative shares|cooperative shares; volksbank shares; genossenschaftsanteile
        0960|Reinsurance claims|pension reinsurance; reinsurance policy; life insurance asset
        0980|Long-term deposits|rent deposit; security deposit paid; kaution
        """,
    ),
    Family(
        "inventory", 0.6, 3000, 1.2, "none", ("journal",),
        ("logistics", "finance", "production"), ("Inventurservice", "Lagerlogistik"),
        ("inventory", "stock", "stocktaking"),
        """
        1000|Raw materials stock|raw material stock; steel stock; stock of materials
        1040|Work in progress|unfinished goods; work in progress; wip valuation
        1050!|Unfinished services|unbilled services; services in progress
        1100|Finished goods|finished goods; finished products stock
        1140|Merchandise stock|merchandise inventory; trade goods stock; goods inventory
        1180|Advance payments on inventory|down payment goods; advance payment supplier
        1190|Supplies stock|operating supplies stock; consumables stock; packaging stock
        1195|Goods in transit|goods in transit; shipment on the way
        """,
        timing="year_end",
    ),
    Family(
        "receivables and other assets", 2.5, 1200, 1.2, "none",
        ("journal", "bank_statement", "invoice"), ("finance", "sales"),
        ("Handel", "Vertrieb", "Service"), ("receivable", "open item", "customer"),
        """
        1200|Trade receivables|customer invoice open; outstanding invoice; debtor
        1215|Receivables from EU customers|eu customer receivable; intra-community invoice open
        1240|Doubtful receivables|doubtful debt; dunning level 3; collection agency
        1260|Receivables from affiliates|intercompany receivable; group clearing
        1300|Other assets|other receivable; refund claim; deposit refund
        1340|Receivables from employees|salary advance; employee advance; travel advance
        1350|Creditors with debit balances|supplier debit balance; overpayment supplier
        1360|Cash in transit|money in transit; cash transfer; geldtransit
        1370|Payroll clearing|payroll clearing; net wage clearing; salary transfer clearing
        1401|Input VAT 7%|input tax 7%; vorsteuer 7; reduced input vat|input7
        1406|Input VAT 19%|input tax 19%; vorsteuer 19; input vat|input19
        1407|Input VAT on EU acquisitions|eu input vat; vorsteuer ig erwerb|eu_acquisition
        1420|VAT refund claims|vat refund; vat return refund; tax office refund
        1433|Import VAT|import vat; einfuhrumsatzsteuer; customs vat|import
        1900|Prepaid expenses|prepaid insurance; prepaid rent; deferred expense
        """,
    ),
    Family(
        "cash and bank", 2.0, 400, 1.3, "none", ("bank_statement", "receipt"),
        ("finance",), ("Sparkasse", "Volksbank", "Kreditbank"), ("transfer", "bank", "cash"),
        """
        1600|Cash|cash register; petty cash; cash deposit; kasse
        1610|Petty cash branch|petty cash office; cash box branch
        1700|Postal bank account|postal giro; postbank
        1800|Bank main account|bank transfer; sepa transfer; account statement
        1810|Bank second account|savings transfer; second bank account
        1820|Bank USD account|usd account; dollar account; fx transfer
        1840|Credit card account|credit card settlement; card statement; amex settlement
        1850|PayPal account|paypal; paypal transfer; paypal settlement
        1880|Time deposits|fixed deposit; time deposit; tagesgeld
        1890|Cheques|cheque deposit; cheque received
        """,
        foreign_share=0.05,
    ),
    Family(
        "equity and private", 0.6, 2000, 1.3, "none", ("journal", "bank_statement"),
        ("management", "finance"), ("Gesellschafter", "Inhaber"), ("owner", "private", "equity"),
        """
        2000!|Subscribed capital|share capital; capital increase
        2100|Private withdrawals|private withdrawal; owner drawing; privatentnahme
        2130|Private taxes|owner income tax; private tax payment; church tax owner
        2150|Private donations|donation; charity; spende
        2180|Private deposits|private deposit; owner contribution; einlage
        2200|Private insurance|private health insurance; owner life insurance
        2920!|Capital reserve|capital reserve; share premium
        2970|Profit carried forward|profit carried forward; prior year result
        2990|Distributions|dividend payout; profit distribution; shareholder dividend
        """,
    ),
    Family(
        "provisions", 0.4, 3000, 1.2, "none", ("journal",), ("finance", "management"),
        ("Steuerberatung", "Wirtschaftsprüfung"), ("provision", "accrual", "year end"),
        """
        3000!|Pension provisions|pension provision; pension obligation actuarial
        3020|Trade tax provisions|trade tax provision; gewerbesteuer rückstellung
        3040|Corporate tax provisions|corporate income tax provision; kst provision
        3070|Other provisions|other provision; accrued expense; outstanding invoices provision
        3074|Vacation provisions|vacation accrual; holiday provision; unused leave
        3079|Warranty provisions|warranty provision; guarantee claims
        3092|Archiving provisions|archiving costs; document retention provision
        3095|Audit provisions|audit fee accrual; annual accounts preparation provision
        """,
        timing="year_end",
    ),
    Family(
        "liabilities", 2.5, 1500, 1.2, "none", ("journal", "bank_statement"), ("finance",),
        ("Kreditbank", "Leasing", "Krankenkasse"), ("liability", "payable", "settlement"),
        """
        3100!|Bonds|bond issue; bond coupon
        3150|Bank loans|loan repayment; bank loan; annuity payment; darlehen
        3250|Advance payments received|customer down payment; advance received; deposit customer
        3300|Trade payables|supplier invoice open; trade payable; creditor
        3350!|Bills of exchange payable|bill of exchange; wechsel
        3400|Payables to affiliates|intercompany payable; group settlement
        3500|Other liabilities|other liability; outstanding payment; misc payable
        3610|Customer credit balances|customer overpayment; credit balance customer
        3720|Wages payable|net wages payable; salaries payable
        3730|Wage tax payable|wage tax; lohnsteuer; payroll tax remittance
        3740|Social security payable|social security contributions payable; health insurance fund
        3801|Output VAT 7%|output tax 7%; umsatzsteuer 7|output7
        3806|Output VAT 19%|output tax 19%; umsatzsteuer 19; vat payable|output19
        3820|VAT prepayments|vat prepayment; ust voranmeldung; advance vat return
        3837|Reverse charge VAT|reverse charge vat; 13b vat; steuerschuldnerschaft|reverse_charge
        3900|Deferred income|deferred income; prepaid by customer; passive rechnungsabgrenzung
        """,
    ),
    Family(
        "revenue", 10, 900, 1.3, "output19", ("invoice",), ("sales",),
        ("Handelshaus", "Bau", "Consulting", "Logistik", "Gastro", "Praxis"),
        ("customer", "sales", "order"),
        """
        4400|Revenue 19% VAT|product sale; sales invoice; order delivery; customer order
        4410|Revenue services 19% VAT|service fee; consulting hours; project invoice; hourly billing
        4300|Revenue 7% VAT|food sale; book sale; reduced rate sale|output7
        4125|Tax-free intra-community supplies|eu delivery; intra-community supply; vat id|eu_supply
        4120|Tax-free export sales|export delivery; third country sale; export invoice|export
        4420|Revenue maintenance contracts|maintenance contract; service agreement; annual support
        4336|Revenue EU services reverse charge|consulting eu client; b2b service eu|reverse_charge
        4338|Revenue services third countries|services non-eu client; consulting usa|export
        4430|Revenue licences|licence fee income; royalty; software subscription revenue
        4100|Tax-exempt revenue|exempt sale; tax-exempt service; medical service|exempt
        4500|Other revenue|misc sales; scrap sale; other sales income
        4560|Commission revenue|commission income; agency fee; brokerage
        4620|Private use of company car|private car use; 1% rule; vehicle private share
        4700|Sales deductions|sales deduction; rebate granted; price reduction
        4730|Cash discounts granted|cash discount granted; skonto customer; early payment discount
        4750!|Revenue from construction contracts|percentage of completion; construction contract
        4760|Bonuses granted|annual bonus customer; volume rebate; customer bonus
        4800|Changes in finished goods|inventory change; stock change finished goods|none|year_end
        """,
        foreign_share=0.06,
    ),
    Family(
        "other operating income", 1.5, 700, 1.4, "none", ("journal", "bank_statement", "invoice"),
        ("finance", "management"), ("Versicherung", "Förderbank", "Verwertung"),
        ("income", "refund", "credit"),
        """
        4830|Other operating income|misc income; other income; sundry income
        4840|Exchange rate gains|fx gain; currency gain; exchange difference gain
        4845|Gains on asset disposals|sale of vehicle; disposal gain; sale used machine|output19
        4860|Rental income|rent received; sublease income; parking rent income|exempt
        4900!|Income from write-ups|write-up; reversal of impairment
        4930|Release of provisions|provision release; reversal of accrual|none|year_end
        4940|Insurance compensation|insurance payout; claims settlement; damage compensation
        4947|Non-cash benefits charged|benefit in kind charged; meal vouchers charged
        4960|Prior period income|prior year income; refund previous year
        4970|Recovered receivables|recovery bad debt; payment written-off receivable
        4975|Grants and subsidies|subsidy; government grant; funding programme; zuschuss
        """,
    ),
    Family(
        "materials and purchased services", 8, 600, 1.3, "input19", ("invoice",),
        ("production", "logistics", "operations"),
        ("Großhandel", "Industriebedarf", "Metallbau", "Elektro", "Holzhandel", "Verpackung"),
        ("purchase", "supplier", "delivery"),
        """
        5400|Goods purchased 19% VAT|goods purchase; merchandise; resale goods; wareneingang
        5100|Raw materials|raw materials; steel sheets; aluminium profiles; timber
        5900|Third-party services|subcontractor; external services; outsourced work; fremdleistung
        5200|Supplies and consumables|consumables; screws; lubricants; welding wire
        5300|Goods purchased 7% VAT|food purchase; books purchase; reduced rate goods|input7
        5425|Intra-community acquisitions|eu purchase; intra-community acquisition|eu_acquisition
        5800|Incoming freight|freight inbound; incoming shipping; delivery charges
        5550|Imports from third countries|import goods; customs clearance; china supplier|import
        5913|EU services reverse charge|eu service supplier; services reverse charge|reverse_charge
        5920|Construction services 13b|construction subcontractor; 13b building work|reverse_charge
        5190|Energy for production|production energy; process gas; electricity production
        5730|Cash discounts received|skonto received; early payment discount; cash discount supplier
        5740|Supplier bonuses|supplier bonus; volume bonus received; annual rebate supplier
        5700|Purchase deductions|purchase rebate; supplier deduction
        5820|Customs duties|customs duty; import duties; zoll|none
        5880!|Changes in raw materials|inventory change raw materials|none|year_end
        """,
        foreign_share=0.06,
    ),
    Family(
        "personnel", 4, 3200, 0.6, "none", ("payroll", "journal"), ("hr", "finance"),
        ("Lohnbüro", "Krankenkasse", "Personaldienst"), ("payroll", "employee", "salary run"),
        """
        6020|Salaries|salaries; monthly salary; gehalt; staff salary
        6000|Wages|wages; hourly wages; production staff wages; lohn
        6110|Employer social security|employer social security; social insurance; sozialversicherung
        6024|Managing director salary|managing director salary; gf gehalt; executive salary
        6030|Temporary staff|temporary staff; agency workers; aushilfe|input19|any
        6035|Mini-jobs|minijob; marginal employment; 538 euro job
        6040|Bonuses|bonus payment; christmas bonus; performance bonus
        6045|Vacation pay|holiday pay; vacation allowance
        6060|Benefits in kind|fuel voucher employee; benefit in kind; sachbezug
        6080|Capital-forming benefits|vwl; capital forming benefit; savings contribution
        6118|Statutory accident insurance|berufsgenossenschaft; bg contribution|none|any
        6130|Voluntary social benefits|staff party; employee gifts; health programme|input19|any
        6140|Company pension|company pension; direct insurance; pension fund contribution
        6150|Severance payments|severance pay; termination settlement
        6170|Flat-rate wage tax|flat-rate wage tax; pauschale lohnsteuer
        """,
        timing="month_end",
        foreign_share=0.0,
    ),
    Family(
        "depreciation", 1.0, 2500, 1.0, "none", ("journal",), ("finance",),
        ("Anlagenbuchhaltung",), ("depreciation", "afa", "write-down"),
        """
        6200|Amortisation of intangibles|amortisation software; amortisation licences
        6220|Depreciation of equipment|depreciation machinery; depreciation equipment
        6222|Depreciation of vehicles|depreciation car; vehicle depreciation
        6230|Special depreciation|special depreciation; 7g depreciation
        6240|Depreciation of buildings|building depreciation; depreciation property
        6260|Write-off low-value assets|gwg write-off; immediate write-off; low-value asset expensed
        6262|Depreciation asset pool|pool depreciation; sammelposten afa
        6270|Write-down of inventory|inventory write-down; obsolete stock write-down
        6280|Write-off of receivables|bad debt write-off; receivable written off; uncollectible
        """,
        timing="year_end",
        foreign_share=0.0,
    ),
    Family(
        "premises", 4, 900, 0.9, "input19", ("invoice", "direct_debit"),
        ("facilities", "operations"),
        ("Hausverwaltung", "Stadtwerke", "Gebäudereinigung", "Hausmeisterservice", "Energie"),
        ("premises", "building", "site"),
        """
        6310|Rent|office rent; warehouse rent; monthly rent; miete|input19|month_start
        6325|Gas, electricity, water|electricity; gas supply; water bill; power supply
        6330|Cleaning|office cleaning; window cleaning; cleaning service
        6335|Maintenance of premises|building repair; plumber; painter; roof repair
        6305|Service charges|ancillary costs; service charge settlement; nebenkosten
        6320|Heating|heating costs; district heating; heating oil
        6340|Waste disposal|waste disposal; container rental; recycling
        6345|Other premises costs|caretaker; snow clearing; garden maintenance
        6315|Parking space rent|parking space rent; garage rent|input19|month_start
        6317|Storage rent|self storage; storage unit rent|input19|month_start
        6350|Property tax|property tax; grundsteuer|none
        6355|Security service|security service; alarm monitoring; guard service
        """,
        foreign_share=0.0,
    ),
    Family(
        "insurance and fees", 2.5, 450, 1.0, "exempt", ("invoice", "direct_debit"),
        ("finance", "management"), ("Versicherung", "Kammer", "Verband"),
        ("premium", "policy", "contribution"),
        """
        6400|Insurance|business liability insurance; insurance premium; contents insurance
        6420|Contributions|chamber of commerce; ihk contribution; association fee; membership
        6430|Other fees|permit fee; administrative fee; gebühr
        6405|Building insurance|building insurance; fire insurance
        6410|Legal protection insurance|legal protection insurance; legal expenses cover
        6436|Cyber insurance|cyber insurance; it insurance
        6437|D&O insurance|d&o insurance; directors liability
        6440|Credit insurance|credit insurance; receivables insurance
        6450|Broadcasting fee|broadcasting fee; rundfunkbeitrag
        6460|Transport insurance|cargo insurance; transport insurance
        """,
        foreign_share=0.0,
    ),
    Family(
        "vehicles", 6, 120, 1.1, "input19", ("receipt", "card_payment", "invoice"),
        ("operations", "sales", "logistics"),
        ("Autohaus", "Tankstelle", "Kfz-Werkstatt", "Reifenservice", "Autovermietung"),
        ("vehicle", "car", "fleet"),
        """
        6530|Fuel|fuel; diesel; petrol; tanken; fuel card
        6540|Vehicle repairs|car repair; inspection; brake pads; workshop
        6560|Vehicle leasing|car leasing; leasing rate; lease instalment|input19|month_start
        6580|Tolls|toll; maut; motorway toll; toll collect
        6590|Parking fees|parking fee; parking garage; parking ticket
        6520|Vehicle insurance|car insurance; vehicle liability insurance; fleet insurance|exempt
        6570|Other vehicle costs|car wash; vignette; roadside assistance
        6532|Truck fuel|truck diesel; adblue; fleet fuel
        6545|Tyres|winter tyres; tyre storage; new tyres; tyre change
        6550|Electric vehicle charging|charging station; ev charging; wallbox electricity
        6555|Vehicle registration|registration fee; number plates; tüv inspection
        6575|Traffic fines|speeding fine; parking fine; bußgeld|none
        6595|Rental cars|rental car; car hire; van rental
        """,
    ),
    Family(
        "advertising and travel", 5, 250, 1.2, "input19", ("invoice", "receipt", "card_payment"),
        ("marketing", "sales", "management"),
        ("Werbeagentur", "Druckerei", "Hotel", "Restaurant", "Reisebüro", "Messebau"),
        ("marketing", "trip", "client"),
        """
        6600|Advertising|online ads; google ads campaign; social media ads; banner
        6640|Entertainment|business lunch; client dinner; bewirtung; restaurant receipt
        6650|Travel costs employees|train ticket; business trip; flight ticket; db ticket
        6680|Hotel costs|hotel; overnight stay; accommodation; hotel booking
        6605|Print advertising|flyer printing; brochure; newspaper ad; poster
        6688|Travel incidentals|taxi; public transport; luggage fee
        6610|Gifts deductible|customer gift; gift up to 50; wine gift
        6645|Trade fairs|trade fair stand; exhibition fee; booth construction; messe
        6625|Marketing agency|marketing agency; seo services; campaign management
        6660|Per diem allowances|per diem; meal allowance trip; verpflegungspauschale|none
        6652|Mileage allowance|mileage allowance; private car business use; kilometre allowance|none
        6670|Travel costs owner|owner travel; owner train ticket; owner flight
        6615|Promotional items|promotional items; give-aways; branded pens
        6630|Sponsoring|sponsoring; sports club sponsorship; event sponsoring
        6620|Gifts non-deductible|expensive gift; gift over limit|none
        6644|Entertainment non-deductible|non-deductible entertainment portion|none
        """,
        foreign_share=0.08,
    ),
    Family(
        "delivery", 2, 180, 1.1, "input19", ("invoice",), ("logistics", "sales"),
        ("Spedition", "Paketdienst", "Verpackung", "Logistik"), ("shipment", "delivery", "freight"),
        """
        6740|Outgoing freight|outgoing freight; shipping; parcel service; courier
        6710|Packaging|packaging material; cartons; pallets; stretch film
        6770|Marketplace fees|marketplace fees; seller fees; platform commission
        6760|Sales commissions|sales commission; agent commission; commercial agent
        6780|Payment service fees|payment fees; card acquirer fees; payment provider
        6730|Return shipments|returns; return shipment; retoure
        6745|Pallet exchange|pallet exchange; euro pallets
        6790|Warranty costs|warranty repair; replacement delivery; goodwill repair customer
        """,
    ),
    Family(
        "office and administration", 6, 140, 1.2, "input19", ("invoice", "receipt", "card_payment"),
        ("finance", "it", "management"),
        ("Bürobedarf", "IT-Service", "Telekommunikation", "Steuerberatung", "Rechtsanwälte",
         "Verlag"),
        ("office", "admin", "service"),
        """
        6815|Office supplies|office supplies; paper; toner; pens; stationery
        6805|Telephone|phone bill; mobile contract; telephone
        6837|Software subscriptions|saas subscription; cloud software; licence subscription
        6855|Bank fees|account fees; bank charges; transaction fees; card fee|exempt
        6800|Postage|postage; stamps; registered letter; porto
        6830|Bookkeeping costs|bookkeeping; tax advisor monthly; payroll accounting fee
        6810|Internet|internet; broadband; dsl; fibre connection
        6840|IT maintenance|it support; server maintenance; managed services
        6850|Other operating needs|first aid kit; office coffee; kitchen supplies
        6821|Training|seminar; training course; workshop fee; certification
        6825|Legal fees|lawyer; legal advice; attorney fees; notary
        6860|Cloud hosting|cloud hosting; server hosting; domain; web hosting
        6835|Equipment rental|copier lease; equipment rental; printer rental
        6820|Periodicals and books|newspaper subscription; specialist books; journals|input7
        6845|Small tools|small tools; tool kit; screwdriver set
        6827|Annual accounts costs|annual accounts; financial statements preparation
        6859|Audit costs|audit; auditor fee; annual audit
        6865|Data protection|data protection officer; gdpr consulting
        """,
        foreign_share=0.06,
    ),
    Family(
        "other operating expenses", 1.5, 300, 1.3, "none", ("journal", "invoice"),
        ("finance", "management"), ("Verwertung", "Gutachter", "Stiftung"),
        ("expense", "loss", "other"),
        """
        6990|Other operating expenses|misc expenses; sundry; other expense
        6880|Exchange rate losses|fx loss; currency loss; exchange difference loss
        6969|Cash differences|cash difference; till shortage
        6960|Prior period expenses|prior year expense; late invoice previous year
        6900|Losses on asset disposals|asset disposal loss; scrapping machine; book value disposal
        6905|Damage claims|compensation paid; damage settlement; claim payment
        6930|Bad debt allowance|allowance doubtful debts; bad debt provision|none|year_end
        6967|Non-deductible expenses|non-deductible; penalty; late filing fine
        6970|Donations|company donation; charitable donation
        6985!|Extraordinary expenses|extraordinary expense
        """,
    ),
    Family(
        "interest and financial result", 1.2, 350, 1.3, "none", ("bank_statement", "journal"),
        ("finance",), ("Kreditbank", "Stadtsparkasse", "Volksbank"), ("interest", "bank", "loan"),
        """
        7300|Interest expense|interest expense; debit interest; sollzinsen
        7310|Loan interest|loan interest; mortgage interest; darlehenszinsen|none|month_end
        7100|Interest income|interest income; credit interest; habenzinsen
        7320|Overdraft interest|overdraft interest; credit line interest
        7340|Late payment interest|default interest; late payment interest supplier
        7330|Interest on tax arrears|late payment interest tax; nachzahlungszinsen
        7020|Dividend income|dividend; distribution received
        7110|Interest on tax refunds|interest tax refund; refund interest
        7350|Guarantee fees|guarantee commission; aval fee|exempt
        7000!|Income from profit transfer|profit transfer; profit and loss transfer agreement
        7190!|Expenses from loss absorption|loss absorption; loss assumption
        7200!|Write-downs on financial assets|impairment financial assets; write-down securities
        """,
    ),
    Family(
        "taxes", 1.0, 1500, 1.2, "none", ("tax_notice", "bank_statement"), ("finance",),
        ("Finanzamt", "Stadtkasse", "Hauptzollamt"), ("tax", "assessment", "prepayment"),
        """
        7610|Trade tax|trade tax; gewerbesteuer; trade tax prepayment
        7600|Corporate income tax|corporate tax; körperschaftsteuer; kst prepayment
        7608|Solidarity surcharge|solidarity surcharge; soli
        7685|Vehicle tax|vehicle tax; kfz-steuer
        7630|Capital gains tax|withholding tax; kapitalertragsteuer
        7640|Tax back payments|tax back payment; prior year tax assessment
        7650|Other taxes|energy tax; insurance tax; other taxes
        7692|Tax refunds prior years|tax refund prior year; refund assessment
        7690!|Deferred taxes|deferred tax; latent taxes
        """,
        foreign_share=0.0,
    ),
)  # fmt: skip

TIMINGS = ("any", "month_start", "month_end", "year_end")


@dataclass(frozen=True)
class Account:
    code: str
    name: str
    family: int
    place: int  # position in its family's listing: earlier accounts are booked more often
    keywords: tuple[str, ...]
    vat_type: str
    timing: str
    has_bookings: bool


def parse_accounts() -> tuple[Account, ...]:
    """Every account of the chart, in code order (the order of the classes file)."""
    accounts = []
    for family_index, family in enumerate(FAMILIES):
        for place, line in enumerate(family.accounts.strip().splitlines()):
            fields = [field.strip() for field in line.split("|")]
            code, name, keywords = fields[:3]
            vat_type = fields[3] if len(fields) > 3 else family.vat_type
            timing = fields[4] if len(fields) > 4 else family.timing
            assert vat_type in VAT_TYPES and timing in TIMINGS, line
            accounts.append(
                Account(
                    code=code.rstrip("!"),
                    name=name,
                    family=family_index,
                    place=place,
                    keywords=tuple(k.strip() for k in keywords.split(";")),
                    vat_type=vat_type,
                    timing=timing,
                    has_bookings=not code.endswith("!"),
                )
            )
    codes = [a.code for a in accounts]
    assert len(set(codes)) == len(codes), "duplicate account code in the chart"
    return tuple(sorted(accounts, key=lambda a: a.code))


def class_codes() -> list[str]:
    """All account codes, including those without bookings, in label-id order."""
    return chart().codes.to_list()


def _offsets(lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of each group in a flattened list of groups."""
    counts = np.asarray(lengths, dtype=np.int64)
    return np.concatenate(([0], np.cumsum(counts)[:-1])), counts


@dataclass(frozen=True)
class Chart:
    """The chart as flat lookup tables, so each row's choices are numpy index arithmetic."""

    accounts: tuple[Account, ...]
    codes: pl.Series
    probabilities: np.ndarray  # per account, by popularity rank; 0 for accounts without bookings
    family: np.ndarray
    family_members: np.ndarray  # account indices grouped by family
    family_start: np.ndarray  # where each family's group starts in family_members
    family_size: np.ndarray
    keywords: pl.Series
    keyword_start: np.ndarray
    keyword_count: np.ndarray
    family_words: pl.Series
    family_word_start: np.ndarray
    family_word_count: np.ndarray
    vendors: pl.Series
    vendor_short: pl.Series
    account_vendors: np.ndarray  # flattened vendor indices per account, most used first
    vendor_start: np.ndarray
    vendor_count: np.ndarray
    departments: np.ndarray  # flattened department indices per family, most used first
    department_start: np.ndarray
    department_count: np.ndarray
    prefixes: pl.Series  # memo prefixes, grouped by document type
    prefix_start: np.ndarray
    prefix_count: np.ndarray
    documents: np.ndarray  # flattened document type indices per family, most used first
    document_start: np.ndarray
    document_count: np.ndarray
    log_median_cents: np.ndarray
    amount_sigma: np.ndarray
    foreign_share: np.ndarray
    vat_type: np.ndarray
    timing: np.ndarray
    unknown_code: pl.Series  # per account: the nearest code above it that is not in the chart


@cache
def chart() -> Chart:
    accounts = parse_accounts()
    rng = np.random.default_rng(CHART_SEED)
    family = np.array([a.family for a in accounts])

    # Popularity: the family's weight over the account's place in the family's listing.
    score = np.array(
        [FAMILIES[a.family].weight / (a.place + 1) if a.has_bookings else 0.0 for a in accounts]
    )
    order = np.argsort(-score, kind="stable")
    booked = int(np.count_nonzero(score))
    probabilities = np.zeros(len(accounts))
    ranks = np.arange(1, booked + 1)
    probabilities[order[:booked]] = (ranks + ZIPF_OFFSET) ** -ZIPF_EXPONENT
    probabilities /= probabilities.sum()

    family_members = np.argsort(family, kind="stable")
    family_start, family_size = _offsets(np.bincount(family, minlength=len(FAMILIES)).tolist())

    keyword_start, keyword_count = _offsets([len(a.keywords) for a in accounts])
    family_word_start, family_word_count = _offsets([len(f.words) for f in FAMILIES])

    vendor_names, vendor_short, account_vendors, vendors_per_account = [], [], [], []
    for fam in FAMILIES:
        surnames = rng.choice(len(SURNAMES), VENDORS_PER_FAMILY, replace=False)
        legal_forms = rng.integers(0, len(LEGAL_FORMS), VENDORS_PER_FAMILY)
        for i in range(VENDORS_PER_FAMILY):
            trade = fam.vendor_trades[i % len(fam.vendor_trades)]
            surname = SURNAMES[surnames[i]]
            vendor_names.append(f"{trade} {surname} {LEGAL_FORMS[legal_forms[i]]}")
            vendor_short.append(surname)
    for account in accounts:
        count = int(rng.integers(3, 7))
        picks = rng.choice(VENDORS_PER_FAMILY, count, replace=False)
        account_vendors.extend(account.family * VENDORS_PER_FAMILY + picks)
        vendors_per_account.append(count)
    vendor_start, vendor_count = _offsets(vendors_per_account)

    departments = [DEPARTMENTS.index(d) for f in FAMILIES for d in f.departments]
    department_start, department_count = _offsets([len(f.departments) for f in FAMILIES])
    prefix_start, prefix_count = _offsets([len(DOCUMENT_PREFIXES[d]) for d in DOCUMENT_TYPES])
    documents = [DOCUMENT_TYPES.index(d) for f in FAMILIES for d in f.document_types]
    document_start, document_count = _offsets([len(f.document_types) for f in FAMILIES])

    median = np.array([FAMILIES[a.family].median_amount for a in accounts])
    account_scale = rng.lognormal(0.0, 0.5, len(accounts))
    codes = {a.code for a in accounts}

    def unknown_neighbour(code: str) -> str:
        value = int(code) + 1
        while f"{value % 10_000:04d}" in codes:
            value += 1
        return f"{value % 10_000:04d}"

    return Chart(
        accounts=accounts,
        codes=pl.Series([a.code for a in accounts], dtype=pl.String),
        probabilities=probabilities,
        family=family,
        family_members=family_members,
        family_start=family_start,
        family_size=family_size,
        keywords=pl.Series([k for a in accounts for k in a.keywords], dtype=pl.String),
        keyword_start=keyword_start,
        keyword_count=keyword_count,
        family_words=pl.Series([w for f in FAMILIES for w in f.words], dtype=pl.String),
        family_word_start=family_word_start,
        family_word_count=family_word_count,
        vendors=pl.Series(vendor_names, dtype=pl.String),
        vendor_short=pl.Series(vendor_short, dtype=pl.String),
        account_vendors=np.asarray(account_vendors),
        vendor_start=vendor_start,
        vendor_count=vendor_count,
        departments=np.asarray(departments),
        department_start=department_start,
        department_count=department_count,
        prefixes=pl.Series([p for d in DOCUMENT_TYPES for p in DOCUMENT_PREFIXES[d]]),
        prefix_start=prefix_start,
        prefix_count=prefix_count,
        documents=np.asarray(documents),
        document_start=document_start,
        document_count=document_count,
        log_median_cents=np.log(median * account_scale * 100),
        amount_sigma=np.array([FAMILIES[a.family].amount_sigma for a in accounts]),
        foreign_share=np.array([FAMILIES[a.family].foreign_share for a in accounts]),
        vat_type=np.array([VAT_TYPES.index(a.vat_type) for a in accounts]),
        timing=np.array([TIMINGS.index(a.timing) for a in accounts]),
        unknown_code=pl.Series([unknown_neighbour(a.code) for a in accounts], dtype=pl.String),
    )


def class_counts(rows: int) -> np.ndarray:
    """Rows per account: exact Zipf shares of `rows`, at least one per booked account if possible.

    Largest-remainder rounding, so the counts add up to `rows` exactly and the imbalance does not
    depend on sampling luck.
    """
    probabilities = chart().probabilities
    booked = probabilities > 0
    minimum = booked.astype(np.int64) if rows >= booked.sum() else np.zeros(len(booked), np.int64)
    share = probabilities * (rows - minimum.sum())
    counts = minimum + np.floor(share).astype(np.int64)
    remainder = rows - counts.sum()
    counts[np.argsort(-(share - np.floor(share)), kind="stable")[:remainder]] += 1
    return counts


def _pick(rng: np.random.Generator, start: np.ndarray, count: np.ndarray, skew: bool) -> np.ndarray:
    """One index per row from its group [start, start + count); `skew` favours the group's first."""
    u = rng.random(len(start))
    return start + (count * (u * u if skew else u)).astype(np.int64)


def _dates(rng: np.random.Generator, timing: np.ndarray) -> np.ndarray:
    """Booking dates: weekdays mostly, recurring accounts at month start/end or on 31 December."""
    n = len(timing)
    span = (LAST_DAY - FIRST_DAY).astype(np.int64) + 1
    days = FIRST_DAY + rng.integers(0, span, n).astype("timedelta64[D]")
    weekday = (days.astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday; Monday is 0
    to_friday_or_monday = np.where(rng.random(n) < 0.5, -1, 2) - (weekday == 6) * 1
    move = (weekday >= 5) & (rng.random(n) < WEEKEND_MOVED_SHARE)
    days = days + np.where(move, to_friday_or_monday, 0).astype("timedelta64[D]")

    month = days.astype("datetime64[M]")
    shift = rng.integers(0, 3, n).astype("timedelta64[D]")
    month_start = month.astype("datetime64[D]") + shift
    month_end = (month + 1).astype("datetime64[D]") - 1 - shift
    year_end = (days.astype("datetime64[Y]") + 1).astype("datetime64[D]") - 1
    year_end = np.where(rng.random(n) < YEAR_END_ON_DEC_31_SHARE, year_end, days)
    recurring = [timing == TIMINGS.index(t) for t in ("month_start", "month_end", "year_end")]
    return np.select(recurring, [month_start, month_end, year_end], days)


def _texts(values: tuple[str, ...] | pl.Series, index: np.ndarray) -> pl.Series:
    return (values if isinstance(values, pl.Series) else pl.Series(values)).gather(index)


def _where(mask: np.ndarray, value: pl.Series | pl.Expr) -> pl.Expr:
    """`value` in the rows where `mask` holds, null (left out of the memo) elsewhere."""
    return pl.when(pl.lit(pl.Series(mask))).then(value)


def clean_chunk(rng: np.random.Generator, accounts: np.ndarray, first_row: int) -> pl.DataFrame:
    """Well-formed rows for the given account indices; entry ids continue after `first_row`."""
    c = chart()
    n = len(accounts)
    family = c.family[accounts]

    sibling = c.family_members[_pick(rng, c.family_start[family], c.family_size[family], False)]
    keyword_account = np.where(rng.random(n) < SIBLING_KEYWORD_SHARE, sibling, accounts)
    keyword = _pick(rng, c.keyword_start[keyword_account], c.keyword_count[keyword_account], False)
    second_keyword = _pick(rng, c.keyword_start[accounts], c.keyword_count[accounts], False)
    has_second_keyword = (rng.random(n) < SECOND_KEYWORD_SHARE) & (second_keyword != keyword)
    family_word = _pick(rng, c.family_word_start[family], c.family_word_count[family], False)

    booked = np.flatnonzero(c.probabilities > 0)
    vendor_account = np.where(rng.random(n) < FOREIGN_VENDOR_SHARE, rng.choice(booked, n), accounts)
    vendor = c.account_vendors[
        _pick(rng, c.vendor_start[vendor_account], c.vendor_count[vendor_account], True)
    ]
    department = np.where(
        rng.random(n) < OTHER_DEPARTMENT_SHARE,
        rng.integers(0, len(DEPARTMENTS), n),
        c.departments[_pick(rng, c.department_start[family], c.department_count[family], True)],
    )
    document = c.documents[_pick(rng, c.document_start[family], c.document_count[family], True)]
    credit_note = (document == DOCUMENT_TYPES.index("invoice")) & (
        rng.random(n) < CREDIT_NOTE_SHARE
    )
    document = np.where(credit_note, DOCUMENT_TYPES.index("credit_note"), document)
    vat_type = np.where(
        rng.random(n) < OTHER_VAT_SHARE, rng.integers(0, len(VAT_TYPES), n), c.vat_type[accounts]
    )
    currency = np.where(
        rng.random(n) < c.foreign_share[accounts],
        1 + rng.choice(3, n, p=FOREIGN_CURRENCY_WEIGHTS),
        0,
    )
    cents = np.maximum(
        1, np.rint(np.exp(rng.normal(c.log_median_cents[accounts], c.amount_sigma[accounts])))
    ).astype(np.int64)
    cents = np.where(credit_note, -cents, cents)
    dates = _dates(rng, c.timing[accounts])
    prefix = _pick(rng, c.prefix_start[document], c.prefix_count[document], False)
    reference = pl.Series(rng.integers(1, 1_000_000, n)).cast(pl.String)
    vendor_short = c.vendor_short.gather(vendor)
    vendor_in_memo = rng.random(n) < VENDOR_IN_MEMO_SHARE
    vendor_first = rng.random(n) < VENDOR_FIRST_SHARE

    frame = pl.DataFrame({"row": np.arange(first_row + 1, first_row + n + 1), "date": dates})
    period = pl.concat_str(
        pl.col("date").dt.month().cast(pl.String).str.zfill(2),
        pl.lit("/"),
        pl.col("date").dt.year().cast(pl.String),
    )
    # The memo's parts in order; a null part is left out.
    memo_parts = [
        _where(vendor_in_memo & vendor_first, vendor_short),
        _where(rng.random(n) < PREFIX_SHARE, c.prefixes.gather(prefix)),
        pl.lit(c.keywords.gather(keyword)),
        _where(has_second_keyword, c.keywords.gather(second_keyword)),
        _where(rng.random(n) < FAMILY_WORD_SHARE, c.family_words.gather(family_word)),
        _where(vendor_in_memo & ~vendor_first, vendor_short),
        _where(
            rng.random(n) < REFERENCE_SHARE,
            pl.concat_str(
                pl.lit(_texts(REFERENCE_PREFIXES, rng.integers(0, len(REFERENCE_PREFIXES), n))),
                pl.lit(reference),
            ),
        ),
        _where(rng.random(n) < PERIOD_SHARE, period),
        _where(rng.random(n) < FILLER_SHARE, _texts(FILLERS, rng.integers(0, len(FILLERS), n))),
    ]
    memo = frame.select(pl.concat_str(memo_parts, separator=" ", ignore_nulls=True)).to_series()
    magnitude = np.abs(cents)
    amount = pl.concat_str(
        pl.lit(_texts(("", "-"), (cents < 0).astype(np.int64))),
        pl.lit(pl.Series(magnitude // 100).cast(pl.String)),
        pl.lit("."),
        pl.lit(pl.Series(magnitude % 100).cast(pl.String)).str.zfill(2),
    )
    return frame.select(
        pl.concat_str(pl.lit("JE"), pl.col("row").cast(pl.String).str.zfill(10)).alias("entry_id"),
        pl.col("date").cast(pl.String),
        # Some systems export names and texts in capitals; clean's case policy undoes it.
        pl.lit(_upper_case_some(rng, c.vendors.gather(vendor), UPPERCASE_VENDOR_SHARE)).alias(
            "vendor"
        ),
        pl.lit(_upper_case_some(rng, memo, UPPERCASE_MEMO_SHARE)).alias("memo"),
        amount.alias("amount"),
        pl.lit(_texts(CURRENCIES, currency)).alias("currency"),
        pl.lit(_texts(DEPARTMENTS, department)).alias("department"),
        pl.lit(_texts(VAT_TYPES, vat_type)).alias("vat_type"),
        pl.lit(_texts(DOCUMENT_TYPES, document)).alias("document_type"),
        pl.lit(c.codes.gather(accounts)).alias("account"),
    )


def _upper_case_some(rng: np.random.Generator, values: pl.Series, share: float) -> pl.Series:
    rows = np.flatnonzero(rng.random(len(values)) < share)
    return values.scatter(rows, values.gather(rows).str.to_uppercase())


def make_dirty(
    rng: np.random.Generator, frame: pl.DataFrame, accounts: np.ndarray, kinds: np.ndarray
) -> pl.DataFrame:
    """`frame` with rows spoiled: `kinds[i]` indexes DIRTY_KINDS, or is -1 for a row left clean.

    A duplicate copies a clean row of the same chunk, entry id included, so `clean` sees an exact
    duplicate and not a reject.
    """
    n = frame.height
    kind = pl.lit(pl.Series(kinds))
    variant = pl.lit(pl.Series(rng.integers(0, 3, n)))
    amount, date = pl.col("amount"), pl.col("date")
    comma_amount = amount.str.replace(".", ",", literal=True)
    bad_amount = (
        pl.when(variant == 0)
        .then(comma_amount)
        .when(variant == 1)
        .then(pl.concat_str(amount, pl.lit(" "), pl.col("currency")))
        .otherwise(pl.concat_str(comma_amount, pl.lit("x")))
    )
    year, month, day = date.str.slice(0, 4), date.str.slice(5, 2), date.str.slice(8, 2)
    bad_date = (
        pl.when(variant == 0)
        .then(pl.concat_str(year, pl.lit("-13-"), day))
        .when(variant == 1)
        .then(pl.concat_str(year, pl.lit("-"), month, pl.lit("-45")))
        .otherwise(pl.concat_str(day, pl.lit("."), month, pl.lit("."), year))  # German format
    )
    latin1_word = pl.lit(pl.Series(LATIN1_WORDS)).gather(
        pl.lit(pl.Series(rng.integers(0, len(LATIN1_WORDS), n)))
    )
    unknown = pl.lit(chart().unknown_code.gather(accounts))

    def spoil(column: str, kind_name: str, value: pl.Expr) -> pl.Expr:
        return (
            pl.when(kind == DIRTY_KINDS.index(kind_name))
            .then(value)
            .otherwise(pl.col(column))
            .alias(column)
        )

    frame = frame.with_columns(
        spoil("amount", "bad_amount", bad_amount),
        spoil("date", "bad_date", bad_date),
        spoil("memo", "invalid_utf8", pl.concat_str(pl.col("memo"), pl.lit(" "), latin1_word)),
        pl.when(kind == DIRTY_KINDS.index("missing_label"))
        .then(pl.lit(""))
        .when(kind == DIRTY_KINDS.index("unknown_label"))
        .then(unknown)
        .otherwise(pl.col("account"))
        .alias("account"),
    )
    duplicates = np.flatnonzero(kinds == DIRTY_KINDS.index("duplicate"))
    if len(duplicates) == 0:
        return frame
    take = np.arange(n)
    take[duplicates] = rng.choice(np.flatnonzero(kinds < 0), len(duplicates))
    return frame[take]


@dataclass(frozen=True)
class LedgerSummary:
    output: str
    classes_output: str
    rows: int
    classes: int
    classes_without_rows: int
    seed: int
    dirty: dict[str, int]


def ledger_chunks(
    rows: int, seed: int, dirty_fraction: float, dirty_kinds: tuple[str, ...]
) -> Iterator[tuple[pl.DataFrame, dict[str, int]]]:
    """The ledger in chunks of about CHUNK_ROWS rows, each with its count of dirty rows by kind.

    Chunks are nearly equal in size so none is tiny, and each has fewer dirty rows than rows
    (at most half plus one), so a duplicate always has a clean row to copy.
    """
    remaining = class_counts(rows)
    chunks = max(1, -(-rows // CHUNK_ROWS))
    dirty_total = int(dirty_fraction * rows)
    kind_codes = np.array([DIRTY_KINDS.index(k) for k in dirty_kinds])
    for index in range(chunks):
        start, end = rows * index // chunks, rows * (index + 1) // chunks
        rng = np.random.default_rng([seed, index])
        # Which accounts land in this chunk: drawn without replacement from the exact totals.
        taken = rng.multivariate_hypergeometric(remaining, end - start)
        remaining = remaining - taken
        accounts = rng.permutation(np.repeat(np.arange(len(taken)), taken))
        frame = clean_chunk(rng, accounts, start)

        dirty_before = dirty_total * start // rows
        dirty_here = dirty_total * end // rows - dirty_before
        kinds = np.full(end - start, -1, dtype=np.int64)
        order = (dirty_before + np.arange(dirty_here)) % len(kind_codes)
        kinds[rng.choice(end - start, dirty_here, replace=False)] = kind_codes[order]
        counts = {k: int(np.count_nonzero(kinds == DIRTY_KINDS.index(k))) for k in DIRTY_KINDS}
        yield (make_dirty(rng, frame, accounts, kinds) if dirty_here else frame), counts


def _latin1_pieces(data: bytes) -> Iterator[bytes | memoryview]:
    """`data` with each Latin-1 stand-in replaced by its byte, as pieces to write in order."""
    view = memoryview(data)
    start = 0
    while (found := data.find(LATIN1_STAND_IN, start)) >= 0:
        yield view[start:found]
        yield bytes([data[found + 2] + 0x40])
        start = found + 3
    yield view[start:]


def _write_csv(chunks: Iterator[tuple[pl.DataFrame, dict[str, int]]], path: Path) -> dict[str, int]:
    totals = dict.fromkeys(DIRTY_KINDS, 0)
    with path.open("wb") as handle:
        for index, (frame, counts) in enumerate(chunks):
            buffer = io.BytesIO()
            frame.write_csv(buffer, include_header=index == 0)
            data = buffer.getvalue()
            handle.writelines(_latin1_pieces(data) if counts["invalid_utf8"] else [data])
            totals = {k: totals[k] + counts[k] for k in DIRTY_KINDS}
    return totals


def _write_parquet(
    chunks: Iterator[tuple[pl.DataFrame, dict[str, int]]], path: Path
) -> dict[str, int]:
    totals = dict.fromkeys(DIRTY_KINDS, 0)
    parts_dir = path.with_name(f".{path.name}.parts")
    parts_dir.mkdir(exist_ok=True)
    parts = []
    try:
        for index, (frame, counts) in enumerate(chunks):
            parts.append(parts_dir / f"{index:06d}.parquet")
            frame.write_parquet(parts[-1])
            totals = {k: totals[k] + counts[k] for k in DIRTY_KINDS}
        # Streams the parts into one file without holding the whole ledger in memory.
        pl.scan_parquet(parts).sink_parquet(path)
    finally:
        for part in parts:
            part.unlink(missing_ok=True)
        parts_dir.rmdir()
    return totals


def generate_ledger(
    output: Path,
    rows: int,
    *,
    seed: int = 0,
    dirty_fraction: float = 0.0,
    classes_output: Path | None = None,
) -> LedgerSummary:
    """Write a synthetic ledger (CSV or Parquet, by the extension of `output`) and its classes.

    `dirty_fraction` of the rows (rounded down) are spoiled, spread evenly over DIRTY_KINDS;
    invalid UTF-8 only in a CSV, since Parquet strings cannot hold it.
    """
    if rows < 1:
        raise ValueError(f"rows must be at least 1, not {rows}")
    if not 0 <= dirty_fraction <= MAX_DIRTY_FRACTION:
        raise ValueError(
            f"dirty fraction must be in [0, {MAX_DIRTY_FRACTION}], not {dirty_fraction}"
        )
    suffix = output.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise ValueError(f"{output}: the output must end in .csv or .parquet")
    kinds = tuple(k for k in DIRTY_KINDS if suffix == ".csv" or k not in CSV_ONLY_KINDS)
    classes_output = classes_output or output.with_name("classes.txt")

    output.parent.mkdir(parents=True, exist_ok=True)
    classes_output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    chunks = ledger_chunks(rows, seed, dirty_fraction, kinds)
    try:
        dirty = (_write_csv if suffix == ".csv" else _write_parquet)(chunks, tmp)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    codes = class_codes()
    classes_output.write_text("".join(f"{code}\n" for code in codes), encoding="utf-8")
    return LedgerSummary(
        output=str(output),
        classes_output=str(classes_output),
        rows=rows,
        classes=len(codes),
        classes_without_rows=int(np.count_nonzero(class_counts(rows) == 0)),
        seed=seed,
        dirty=dirty,
    )
